"""Shadow mode and exploration (services/cache/shadow.py) through the cache stage, over an
in-memory stand-in for Milvus: a planted false hit is found by its shadow check and its entry's
threshold tightens; the client's request has one reply; the shadow's answer is never stored."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY
from switchyard.v1.envelope_pb2 import Choice, Response

from services.cache.budget import EntryStats
from services.cache.lookup import SemanticCache
from services.cache.policy import CachePolicy
from services.cache.shadow import MAC_KEY, Checks, Marker, agree, shadow_request
from services.cache.stage import CacheStage
from services.cache.store import Entry
from services.gateway.reader import JOBS_ANSWERED_ELSEWHERE
from shared.runtime.bus import JOB_HEADER, header
from shared.runtime.config import load_settings
from shared.runtime.envelope import REQUEST_ID_RE, Envelope
from shared.runtime.stage import job_of, out_record
from shared.runtime.storage import open_store
from tests.helpers import envelopes

QUESTION = "What is 37+58?"


def chat(rid: str, text: str, tenant: str = "acme") -> Envelope:
    return envelopes.chat(rid, text, tenant, max_tokens=8, stream=True)


def answer(text: str) -> bytes:
    return Response(choices=[Choice(text=text, finish_reason="stop")], model_version="v1").SerializeToString()


class FakeStore:
    """What SemanticCache and Checks use of CacheStore: each prompt finds the listed entries at
    the listed similarities; `record` adds an outcome to an entry's stats as Milvus' rewrite does."""

    has_stats = True

    def __init__(self, found: dict[str, list[tuple[str, float]]], entries: dict[str, Entry]) -> None:
        self.found, self.entries, self.recorded, self.stored = found, entries, 0, 0

    def search(self, key, vec, k, at_ms=None, versions=()):  # type: ignore[no-untyped-def]
        found = self.found.get(f"{key.tenant}/{key.text}", self.found.get(key.text, []))
        return [replace(self.entries[i], similarity=s) for i, s in found][:k]

    def get(self, entry_id: str, tenant: str) -> Entry | None:
        return self.entries.get(entry_id)

    def record(self, entry_id: str, tenant: str, similarity: float, correct: bool) -> EntryStats:
        e = self.entries[entry_id]
        stats = EntryStats.decode(e.stats).add(similarity, correct)
        self.entries[entry_id] = replace(e, stats=stats.encode())
        self.recorded += 1
        return stats

    def put(self, *a: object, **kw: object) -> bool:
        self.stored += 1
        return True


class FakeEmbedder:
    last_batch_size = 1

    async def embed(self, text: str) -> np.ndarray:
        return np.zeros(384, dtype=np.float32)


@pytest.fixture
def stage(tmp_path: Path) -> CacheStage:
    settings = load_settings(internal_token="tok-" + "x" * 40, var_dir=tmp_path, s3_endpoint=None)
    stage = CacheStage(settings, open_store(settings))
    entries = {
        # The planted false hit: "37+58" was answered 96 (the engine answers 95).
        "planted": Entry("planted", QUESTION, answer("96"), "r0", 2**62, model_version="v1"),
        "other": Entry("other", "What is 12+30?", answer("42"), "r1", 2**62, model_version="v1"),
    }
    store = FakeStore(
        {"What's 37+58?": [("planted", 0.93)], "What's 12+30?": [("other", 0.93)]},
        entries,
    )
    stage.cache = SemanticCache(
        store,  # type: ignore[arg-type]
        FakeEmbedder(),  # type: ignore[arg-type]
        CachePolicy(floor=0.8),
        checks=Checks(settings.internal_token.get_secret_value(), 1.0, rng=random.Random(7)),
    )
    return stage


def metric(name: str, tenant: str = "acme") -> float:
    return REGISTRY.get_sample_value(name, {"tenant": tenant}) or 0.0


async def test_shadow_mode_finds_a_planted_false_hit_and_tightens_that_entry(stage: CacheStage) -> None:
    cache = stage.cache
    assert cache is not None
    before = (metric("sy_cache_shadow_checks_total"), metric("sy_cache_shadow_disagreements_total"))
    emits = await stage.handle(chat("q1", "What's 37+58?"))
    # The client's reply, and the shadow request for the engine under an id of its own.
    [reply] = [e for e in emits if e.topic == stage.hit]
    [shadow] = [e for e in emits if e.topic == stage.miss]
    assert reply.envelope.request_id == "q1" and reply.envelope.cache.hit
    assert reply.envelope.response.choices[0].text == "96"
    sh = shadow.envelope
    assert sh.request_id.startswith("q1:shadow:") and REQUEST_ID_RE.match(sh.request_id)
    assert not sh.request.sampling.stream and sh.metadata["no_store"] == "1" and not sh.timings
    assert header(out_record(shadow).headers, JOB_HEADER) == "cache_shadow" in JOBS_ANSWERED_ELSEWHERE
    assert header(out_record(reply).headers, JOB_HEADER) == ""

    # The engine answers the shadow (95): the write-back judges it, records it, stores nothing.
    sh.response.CopyFrom(Response.FromString(answer("95")))
    assert await cache.write_back(sh) == "shadow"
    store = cache.store
    assert cache.checks.counts["shadow_disagreements"] == 1 and store.recorded == 1  # type: ignore[attr-defined]
    assert store.stored == 0 and store.entries["planted"].response == answer("96")  # type: ignore[attr-defined]
    assert metric("sy_cache_shadow_checks_total") == before[0] + 1
    assert metric("sy_cache_shadow_disagreements_total") == before[1] + 1
    assert metric("sy_cache_false_hit_ratio") == 1.0 and metric("sy_cache_false_hit_ratio_upper") == 1.0
    assert 0 < metric("sy_cache_false_hit_ratio_lower") < 1

    # The same paraphrase at the same similarity is no longer served from that entry...
    again = await cache.lookup(chat("q2", "What's 37+58?"))
    assert not again.hit and again.reason == "below_threshold"
    # ...while another entry at that similarity still is.
    other = await cache.lookup(chat("q3", "What's 12+30?"))
    assert other.hit and other.entry is not None and other.entry.id == "other"


async def test_an_agreeing_shadow_counts_as_correct_and_changes_no_threshold(stage: CacheStage) -> None:
    cache = stage.cache
    assert cache is not None
    emits = await stage.handle(chat("q1", "What's 12+30?"))
    [shadow] = [e.envelope for e in emits if e.topic == stage.miss]
    shadow.response.CopyFrom(Response.FromString(answer("42.")))
    assert await cache.write_back(shadow) == "shadow"
    assert cache.checks.counts["shadow_checks"] == 1 and cache.checks.counts["shadow_disagreements"] == 0
    assert (await cache.lookup(chat("q2", "What's 12+30?"))).hit


async def test_a_miss_near_a_refused_entry_explores_it(stage: CacheStage) -> None:
    """vCache's explore: the tenant's floor refuses the candidate, the miss carries it to the
    engine, and the engine's answer (stored as usual) becomes an outcome of that entry."""
    cache = stage.cache
    assert cache is not None
    cache.policy.set_floors({"acme": 0.95})
    [miss] = await stage.handle(chat("q1", "What's 12+30?"))
    env = miss.envelope
    assert miss.topic == stage.miss and env.cache.tier == "explore" and env.cache.entry_id == "other"
    assert job_of(env) == ""  # the client's own request: answered to the client as usual
    env.response.CopyFrom(Response.FromString(answer("42")))
    assert await cache.write_back(env) is None  # judged, then stored like any miss
    assert cache.checks.counts["explored"] == cache.checks.counts["explore_checks"] == 1
    assert cache.store.recorded == 1  # type: ignore[attr-defined]
    assert cache.store.stored == 1  # type: ignore[attr-defined]
    assert EntryStats.decode(cache.store.entries["other"].stats).n == 1  # type: ignore[attr-defined]


def test_markers_are_signed_and_stripped() -> None:
    m = Marker("secret")
    env = shadow_request(chat("q1", QUESTION), "planted", 0.93, m)
    check = m.read(env)
    assert check is not None and (check.kind, check.entry_id) == ("shadow", "planted")
    assert abs(check.similarity - 0.93) < 1e-6
    assert Marker("other secret").read(env) is None
    forged = Envelope()
    forged.CopyFrom(env)
    forged.cache.entry_id = "someone-elses"
    assert m.read(forged) is None
    del forged.metadata[MAC_KEY]
    assert m.read(forged) is None
    Marker.strip(forged)
    assert not forged.HasField("cache") and MAC_KEY not in forged.metadata
    original = chat("q1", QUESTION)
    shadow_request(original, "planted", 0.93, m)
    assert original.request.sampling.stream and not original.metadata  # the original untouched


def test_answers_agree_when_normalised_or_close_with_the_same_numbers() -> None:
    assert agree("95", " 95. ", 0.9) and agree("Paris", "paris!", 1.0)
    assert not agree("95", "96", 0.9) and not agree("The answer is 95.", "The answer is 96.", 0.5)
    long_a = "You can reset it under Settings, then Security, then Reset password in 2 steps"
    long_b = "You can reset it under Settings, then Security, then Reset your password in 2 steps"
    assert agree(long_a, long_b, 0.9) and not agree(long_a, long_b, 1.0)
    assert not agree(long_a, long_b.replace("2 steps", "3 steps"), 0.5)


async def test_each_tenant_is_held_to_its_own_target(stage: CacheStage) -> None:
    """An entry with 100 clean checks at 0.86 (under the 0.9 floor): within a 5% target (the
    Wilson upper end is 3.7%), not within the default 1%."""
    cache = stage.cache
    assert cache is not None
    store = cache.store
    seen = EntryStats()
    for _ in range(100):
        seen = seen.add(0.86, True)
    for tenant in ("acme", "strict"):
        store.entries[f"e-{tenant}"] = Entry(
            f"e-{tenant}", QUESTION, answer("95"), "r", 2**62, stats=seen.encode()
        )  # type: ignore[attr-defined]
        store.found[f"{tenant}/What's 37+58?"] = [(f"e-{tenant}", 0.86)]  # type: ignore[attr-defined]
    cache.policy.set_floors({"acme": 0.9, "strict": 0.9})
    cache.policy.set_targets({"acme": 0.05})
    assert (await cache.lookup(chat("q1", "What's 37+58?", tenant="acme"))).hit
    refused = await cache.lookup(chat("q2", "What's 37+58?", tenant="strict"))
    assert not refused.hit and refused.reason == "below_threshold"
