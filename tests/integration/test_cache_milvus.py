"""The cache logic (services/cache/lookup.py) against the real embedded Milvus server and MiniLM."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from pathlib import Path

import numpy as np
import pytest
from switchyard.v1.envelope_pb2 import (
    AdapterRef,
    ChatMessage,
    Choice,
    MediaRef,
    Request,
    Response,
    SamplingParams,
    Usage,
)
from switchyard.v1.events_pb2 import AdapterEvent, AdapterVersion, Heartbeat

from services.cache.embed import BatchingEmbedder, load_minilm, load_onnx_minilm
from services.cache.front import ExactFront
from services.cache.keys import cache_key
from services.cache.lookup import SemanticCache
from services.cache.policy import CachePolicy
from services.cache.store import CacheStore, Entry, Purge, now_ms
from services.cache.versions import LiveVersions
from shared.devstack.embedded.milvus import EmbeddedMilvus
from shared.runtime.envelope import Envelope, Kind

_n = itertools.count()


ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = Path(os.environ.get("TEST_MODELS_DIR") or ROOT / "var" / "models")


@pytest.fixture(scope="module")
def encode():  # type: ignore[no-untyped-def]
    # As the cache service runs it: ONNX Runtime (SY_CACHE_EMBED_BACKEND), one thread
    # (SY_CACHE_EMBED_THREADS); `switchyard models build` exported it (else this does).
    return load_onnx_minilm(MODELS_DIR, threads=1)


def test_the_torch_embedder_runs_on_the_threads_it_was_given() -> None:
    import torch

    v = load_minilm(threads=1)(["How do I reset my password?"])
    assert torch.get_num_threads() == 1
    assert v.shape == (1, 384) and abs(float((v * v).sum()) - 1.0) < 1e-4


def test_the_onnx_embedder_gives_the_torch_models_vectors(encode) -> None:  # type: ignore[no-untyped-def]
    """Thresholds and the verifier were tuned on sentence-transformers' vectors: the ONNX export
    must give the same ones, for short and long prompts (cut at 256 tokens), alone or padded in
    a batch of mixed lengths."""
    texts = [
        "How do I reset my password?",
        "a",
        "Is the clinic open on Sundays? " * 3,
        "word " * 400,  # past the model's 256 tokens
        "Quelle est la capitale de l'Australie ?",
    ]
    ref = load_minilm(threads=1)(texts)
    batch = encode(texts)
    assert batch.shape == (5, 384) and batch.dtype == np.float32
    assert np.allclose((ref * batch).sum(axis=1), 1.0, atol=1e-4), (ref * batch).sum(axis=1)
    alone = np.concatenate([encode([t]) for t in texts])
    assert np.allclose(alone, batch, atol=1e-5)  # padding changes nothing


@pytest.fixture
def cache(milvus: EmbeddedMilvus, encode) -> SemanticCache:  # type: ignore[no-untyped-def]
    store = CacheStore(milvus.uri, collection=f"t_cache_{next(_n)}_{int(time.time())}")
    store.ensure()
    c = SemanticCache(store, BatchingEmbedder(encode), CachePolicy(floor=0.8, ttl_s=3600))
    yield c
    store.drop()
    store.close()


def req(
    text: str | list[str],
    *,
    tenant: str = "acme",
    model: str = "sy-tiny",
    adapter: tuple[str, int] | None = None,
    temperature: float | None = 0.0,
    media: str = "",
    rid: str | None = None,
) -> Envelope:
    turns = [text] if isinstance(text, str) else text
    msgs = [ChatMessage(role="user" if i % 2 == 0 else "assistant", content=t) for i, t in enumerate(turns)]
    s = SamplingParams(max_tokens=16)
    if temperature is not None:
        s.temperature = temperature
    env = Envelope(
        request_id=rid or f"r-{next(_n)}",
        tenant=tenant,
        kind=Kind.KIND_CHAT,
        model=model,
        request=Request(messages=msgs, sampling=s),
    )
    if adapter:
        env.adapter_ref.CopyFrom(AdapterRef(name=adapter[0], version=adapter[1]))
    if media:
        env.media.append(MediaRef(sha256=media, modality="image"))
    return env


def answered(env: Envelope, text: str) -> Envelope:
    env.response.CopyFrom(
        Response(choices=[Choice(text=text, finish_reason="stop")], usage=Usage(total_tokens=3), pool="vllm")
    )
    return env


async def stored(cache: SemanticCache, env: Envelope, answer: str = "the answer") -> Envelope:
    assert await cache.write_back(answered(env, answer)) is None
    return env


async def stored_v(cache: SemanticCache, env: Envelope, model_version: str) -> Envelope:
    env = answered(env, "the answer")
    env.response.model_version = model_version
    assert await cache.write_back(env) is None
    return env


async def test_exact_and_paraphrase_hit_serve_the_stored_answer(cache: SemanticCache) -> None:
    await stored(cache, req("How do I reset my password?"), "Settings > Security > Reset.")
    exact = await cache.lookup(req("How do I reset my password?"))
    assert exact.hit and exact.tier == "exact"
    para = await cache.lookup(req("How can I reset my password?"))
    assert para.hit and para.tier == "semantic" and para.similarity > 0.9
    env = req("How can I reset my password?")
    cache.apply_hit(env, para)
    assert env.cache.hit and env.cache.tier == "semantic" and env.cache.entry_id == para.entry.id  # type: ignore[union-attr]
    assert env.response.choices[0].text == "Settings > Security > Reset."
    assert env.response.pool == "vllm"
    assert {t.stage for t in env.timings} >= {"cache_exact", "cache_embed", "cache_search", "cache_verify"}
    assert all(t.attrs["parent"] == "cache" for t in env.timings)


async def test_unrelated_prompt_and_near_misses_miss(cache: SemanticCache) -> None:
    await stored(cache, req("Is the call-out fee included in the quote?"))
    await stored(cache, req("What happened in 1066?"))
    assert not (await cache.lookup(req("What is the capital of Peru?"))).hit
    neg = await cache.lookup(req("Is the call-out fee excluded from the quote?"))
    assert not neg.hit and neg.reason.startswith("verifier:")
    num = await cache.lookup(req("What happened in 1666?"))
    assert not num.hit


async def test_scope_tenant_model_adapter_media(cache: SemanticCache) -> None:
    q = "How do I export my data?"
    await stored(cache, req(q, adapter=("math", 1), media="aa" * 32))
    assert (await cache.lookup(req(q, adapter=("math", 1), media="aa" * 32))).hit
    assert not (await cache.lookup(req(q, tenant="other", adapter=("math", 1), media="aa" * 32))).hit
    assert not (await cache.lookup(req(q, model="sy-big", adapter=("math", 1), media="aa" * 32))).hit
    assert not (await cache.lookup(req(q, adapter=("math", 2), media="aa" * 32))).hit
    assert not (await cache.lookup(req(q, media="aa" * 32))).hit  # base model
    assert not (await cache.lookup(req(q, adapter=("math", 1), media="bb" * 32))).hit
    assert not (await cache.lookup(req(q, adapter=("math", 1)))).hit


async def test_ttl_expiry_and_sweep(cache: SemanticCache) -> None:
    env = await stored(cache, req("When does the shop open?"))
    assert (await cache.lookup(req("When does the shop open?"))).hit
    later = now_ms() + 3600 * 1000 + 1
    assert not (await cache.lookup(req("When does the shop open?"), at_ms=later)).hit
    assert not (await cache.lookup(req("When does the store open?"), at_ms=later)).hit
    assert cache.store.sweep(at_ms=later) >= 1
    vec = cache.embedder.encode_now(["When does the shop open?"])[0]
    assert cache.store.search(cache_key(env), vec, 5) == []  # gone, not only filtered out


async def test_adapter_version_invalidation(cache: SemanticCache) -> None:
    await stored(cache, req("Summarise the refund policy", adapter=("law", 1)))
    await stored(cache, req("Summarise the refund policy", adapter=("law", 2)))
    ev = AdapterEvent(type=AdapterEvent.TYPE_VERSION_DELETED, name="law", version=1)
    ev.versions.append(AdapterVersion(version=2))
    assert await cache.on_adapter_event(ev) == 1
    assert not (await cache.lookup(req("Summarise the refund policy", adapter=("law", 1)))).hit
    assert (await cache.lookup(req("Summarise the refund policy", adapter=("law", 2)))).hit
    gone = AdapterEvent(type=AdapterEvent.TYPE_DELETED, name="law")
    assert await cache.on_adapter_event(gone) == 1
    assert not (await cache.lookup(req("Summarise the refund policy", adapter=("law", 2)))).hit


async def test_follow_up_turn_isolation(cache: SemanticCache) -> None:
    await stored(cache, req(["Tell me about Python lists", "Lists are mutable...", "How do I sort it?"]))
    same = await cache.lookup(
        req(["Tell me about Python lists", "Lists are mutable...", "How do I sort it?"])
    )
    assert same.hit
    other = req(["Tell me about Python dicts", "Dicts map keys...", "How do I sort it?"])
    assert not (await cache.lookup(other)).hit
    assert not (await cache.lookup(req("How do I sort it?"))).hit


async def test_sampled_no_store_and_errors_bypass(cache: SemanticCache) -> None:
    hot = answered(req("Write a haiku about rain", temperature=0.7), "x")
    assert await cache.write_back(hot) == "sampled"
    assert (
        await cache.write_back(answered(req("Write a haiku about rain", temperature=None), "x")) == "sampled"
    )
    await stored(cache, req("Write a haiku about rain"))
    assert (await cache.lookup(req("Write a haiku about rain", temperature=0.7))).reason == "sampled"
    private = req("My account number is 1234, what is my balance?")
    private.metadata["no_store"] = "true"
    assert await cache.write_back(answered(private, "x")) == "no_store"
    failed = answered(req("Translate this"), "")
    failed.error.code = "engine_error"
    assert await cache.write_back(failed) == "error"


async def test_write_back_dedupes_by_request_id(cache: SemanticCache) -> None:
    env = req("What are your opening hours?", rid="dup-1")
    await stored(cache, env)
    again = answered(req("What are your opening hours?", rid="dup-1"), "the answer")
    assert await cache.write_back(again) == "duplicate"
    assert cache.store.count() == 1


async def test_batched_embedding_of_concurrent_lookups(cache: SemanticCache) -> None:
    import asyncio

    outs = await asyncio.gather(*(cache.lookup(req(f"question number {i} about billing")) for i in range(8)))
    assert all(not o.hit for o in outs)
    assert cache.embedder.batches < 8 and cache.embedder.last_batch_size >= 1


async def test_a_write_back_reuses_the_vector_its_lookup_embedded(milvus: EmbeddedMilvus, encode) -> None:  # type: ignore[no-untyped-def]
    """A miss is embedded once: its write-back takes the vector its lookup computed (the recent
    vectors are bounded); the stored entry is then found by a paraphrase as usual."""
    texts: list[str] = []

    def recording_encode(batch):  # type: ignore[no-untyped-def]
        texts.extend(batch)
        return encode(batch)

    store = CacheStore(milvus.uri, collection=f"t_cache_{next(_n)}_{int(time.time())}")
    store.ensure()
    try:
        c = SemanticCache(
            store, BatchingEmbedder(recording_encode, recent=2), CachePolicy(floor=0.8, ttl_s=3600)
        )
        env = req("How do I reset my password?")
        assert not (await c.lookup(env)).hit and texts == ["How do I reset my password?"]
        await stored(c, env)
        assert texts == ["How do I reset my password?"] and c.embedder.reused == 1
        assert (await c.lookup(req("How can I reset my password?"))).hit
        for q in ("Which plan includes phone support?", "What are your opening hours?"):
            await c.lookup(req(q))  # pushes the first text out of the two remembered
        await c.lookup(req("How do I reset my password?", tenant="other"))
        assert texts.count("How do I reset my password?") == 2
    finally:
        store.drop()
        store.close()


async def test_model_version_change_invalidates_and_filters(cache: SemanticCache) -> None:
    from switchyard.v1.events_pb2 import Heartbeat

    old = answered(req("What is the return window?"), "30 days")
    old.response.model_version = "v1"
    assert await cache.write_back(old) is None
    other = answered(req("What is the return window?", model="sy-big"), "14 days")
    other.response.model_version = "b1"
    assert await cache.write_back(other) is None
    assert (await cache.lookup(req("What is the return window?"))).hit  # no heartbeat yet: unknown
    # The model is retrained under the same name: its workers now report v2.
    n = await cache.on_heartbeat(Heartbeat(model_versions={"sy-tiny": "v2"}))
    assert n == 1
    assert not (await cache.lookup(req("What is the return window?"))).hit
    assert (await cache.lookup(req("What is the return window?", model="sy-big"))).hit  # other model kept
    new = answered(req("What is the return window?", rid="after-v2"), "60 days")
    new.response.model_version = "v2"
    assert await cache.write_back(new) is None
    hit = await cache.lookup(req("What's the return window?"))
    assert hit.hit and Response.FromString(hit.entry.response).choices[0].text == "60 days"  # type: ignore[union-attr]


async def test_per_tenant_floor(cache: SemanticCache) -> None:
    await stored(cache, req("How do I reset my password?", tenant="strict"))
    await stored(cache, req("How do I reset my password?", tenant="loose"))
    cache.policy.set_floors({"strict": 0.999})
    assert not (await cache.lookup(req("How can I reset my password?", tenant="strict"))).hit
    assert (await cache.lookup(req("How can I reset my password?", tenant="loose"))).hit
    cache.policy.set_floors({})
    assert (await cache.lookup(req("How can I reset my password?", tenant="strict"))).hit


def test_collection_without_model_versions_is_replaced(milvus: EmbeddedMilvus) -> None:
    from pymilvus import DataType, MilvusClient

    name = f"t_old_{int(time.time())}"
    client = MilvusClient(uri=milvus.uri)
    s = client.create_schema(auto_id=False)
    s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    s.add_field("vector", DataType.FLOAT_VECTOR, dim=384)
    idx = client.prepare_index_params()
    idx.add_index("vector", index_type="FLAT", metric_type="COSINE")
    client.create_collection(name, schema=s, index_params=idx)
    store = CacheStore(milvus.uri, collection=name)
    store.ensure()
    fields = {f["name"] for f in client.describe_collection(name)["fields"]}
    assert "model_version" in fields and "exact_key" in fields
    store.drop()
    store.close()
    client.close()


async def test_milvus_exact_tier_is_read_from_the_search(cache: SemanticCache) -> None:
    """Past the in-memory front, one Milvus search serves both tiers: a candidate with this
    request's exact key is an exact hit (no verifier, into the front), and no exact-key query of
    its own runs beside the embedding. Same text under another exact key (the last message's
    `name` differs: outside the scope hashes, inside the exact key) is not an exact hit."""
    cache.front = ExactFront(0)  # Milvus' exact tier, not the in-memory front
    await stored(cache, req("How do I reset my password?"), "Settings > Security > Reset.")
    reads = count_milvus_reads(cache)
    out = await cache.lookup(req("How do I reset my password?"))
    assert out.hit and out.tier == "exact" and out.similarity == 1.0 and reads == ["search"]
    rows = {stage: attrs for stage, *_, attrs in out.timings}
    assert rows["cache_search"]["exact"] is True and "cache_verify" not in rows
    assert rows["cache_exact"] == {"front": False}

    named = req("How do I reset my password?")
    named.request.messages[-1].name = "bob"
    assert cache_key(named).exact != cache_key(req("How do I reset my password?")).exact
    other = await cache.lookup(named)
    assert other.hit and other.tier == "semantic"  # identical text: the verifier's to pass

    cache.front = ExactFront(8)
    reads.clear()
    assert (await cache.lookup(req("How do I reset my password?"))).tier == "exact" and reads == ["search"]
    assert (await cache.lookup(req("How do I reset my password?"))).tier == "exact" and reads == ["search"]
    assert len(cache.front) == 1  # the search's exact find went to the front


def count_milvus_reads(cache: SemanticCache) -> list[str]:
    """Records "search" / "query" for every read the cache sends Milvus."""
    calls: list[str] = []
    client = cache.store.client
    search, query = client.search, client.query

    def counting(name, call):  # type: ignore[no-untyped-def]
        def wrapped(*a, **kw):  # type: ignore[no-untyped-def]
            calls.append(name)
            return call(*a, **kw)

        return wrapped

    client.search, client.query = counting("search", search), counting("query", query)  # type: ignore[method-assign]
    return calls


async def test_the_pipeline_lookup_reuses_what_the_peek_found(cache: SemanticCache) -> None:
    """The gateway's peek is the request's whole lookup (exact, then semantic + verifier); when the
    same request then reaches the stage, the stage takes the peek's outcome (awaiting it if it is
    still running) instead of looking again. Another request, or the same id with other content,
    is looked up anew. Each request counts once in the stats."""
    cache.front = ExactFront(0)  # Milvus' exact tier, not the in-memory front
    await stored(cache, req("How do I reset my password?"), "Settings > Security > Reset.")
    calls = count_milvus_reads(cache)
    assert (await cache.peek(req("How do I reset my password?", rid="p-1"))).hit and calls == ["search"]
    out = await cache.lookup(req("How do I reset my password?", rid="p-1"))
    assert out.hit and out.tier == "exact" and calls == ["search"]  # not asked again
    assert out.entry is not None and out.entry.prompt == "How do I reset my password?"
    assert [(s, a) for s, *_, a in out.timings] == [("cache_from_peek", {"tier": "exact"})]

    # A paraphrase: the peek finds the semantic hit itself; the stage, reached while the peek is
    # still out, waits for it rather than embedding and searching a second time.
    calls.clear()
    peek = asyncio.ensure_future(cache.peek(req("How can I reset my password?", rid="p-2")))
    await asyncio.sleep(0)  # the peek has started
    out = await cache.lookup(req("How can I reset my password?", rid="p-2"))
    assert out.hit and out.tier == "semantic" and (await peek).tier == "semantic"
    assert calls == ["search"]

    # A miss: the stage goes on with the peek's finding (and its reason), without a lookup.
    calls.clear()
    assert not (await cache.peek(req("Which plan includes phone support?", rid="p-4"))).hit
    out = await cache.lookup(req("Which plan includes phone support?", rid="p-4"))
    assert not out.hit and calls == ["search"]
    assert [(s, a) for s, *_, a in out.timings] == [("cache_from_peek", {"reason": out.reason})]

    calls.clear()
    assert (await cache.lookup(req("How do I reset my password?", rid="p-1"))).hit  # remembered once
    assert calls == ["search"]
    await cache.peek(req("How do I reset my password?", rid="p-3"))
    assert (await cache.lookup(req("Which plan includes phone support?", rid="p-3"))).hit is False
    assert calls == ["search"] * 3  # same id, other content: looked up anew
    s = cache.stats
    assert (s.peeks, s.peek_hits) == (4, 3)
    # 4 peeks + 2 lookups of their own; the stage's reuse of a peek is not counted again.
    assert (s.lookups, s.hits_exact, s.hits_semantic) == (6, 3, 1)


async def test_lookups_never_wait_for_a_time_tick_and_see_a_finished_write_back(cache: SemanticCache) -> None:
    """A Session read waits for Milvus' next time tick (~0.2 s) whenever this process wrote since
    (pymilvus tracks the last write per collection), which every lookup after a write-back paid.
    Lookups read Eventually; `put` itself waits until its row is visible, so a lookup right after
    a write-back still finds it."""
    cache.front = ExactFront(0)  # every lookup asks Milvus here
    levels: list[str] = []
    client = cache.store.client
    query, search = client.query, client.search

    def recording(call):  # type: ignore[no-untyped-def]
        def wrapped(*a, **kw):  # type: ignore[no-untyped-def]
            levels.append(kw.get("consistency_level", "default"))
            return call(*a, **kw)

        return wrapped

    await stored(cache, req("How do I reset my password?"), "Settings > Security > Reset.")
    client.query, client.search = recording(query), recording(search)  # type: ignore[method-assign]
    exact = await cache.lookup(req("How do I reset my password?"))
    para = await cache.lookup(req("How can I reset my password?"))
    assert exact.hit and exact.tier == "exact" and para.hit and para.tier == "semantic"
    assert levels and set(levels) == {"Eventually"}, levels
    levels.clear()
    await stored(cache, req("Which plan includes phone support?"), "Pro and above.")
    assert "Session" in levels  # the write path is where the wait belongs
    levels.clear()
    assert (await cache.lookup(req("Which plan includes phone support?"))).hit  # visible at once
    assert set(levels) == {"Eventually"}, levels


async def test_the_front_answers_repeats_from_memory_and_never_what_milvus_would_not(
    cache: SemanticCache,
) -> None:
    """A written-back entry is answered by lookups and peeks without a Milvus query; an entry
    another replica wrote is found in Milvus once, then from memory. Expiry, a model version no
    longer live, an adapter version deleted and a purge (this replica's, with Milvus; another's,
    front only) each stop the front from serving it, exactly where Milvus would stop."""
    await stored_v(cache, req("How do I reset my password?"), "v1")
    calls = count_milvus_reads(cache)  # the lookups' reads (a write-back reads too)
    out = await cache.lookup(req("How do I reset my password?"))
    assert out.hit and out.tier == "exact" and calls == []
    assert out.entry is not None and Response.FromString(out.entry.response).choices[0].text == "the answer"
    assert [a for s, *_, a in out.timings if s == "cache_exact"] == [{"front": True}]
    assert (await cache.peek(req("How do I reset my password?"))).hit and calls == []
    assert cache.stats.front_hits == 2 and len(cache.front) == 1

    # Written by another replica (a cache of its own on the same collection): Milvus once.
    other = SemanticCache(cache.store, cache.embedder, cache.policy)
    await stored_v(other, req("Which plan includes phone support?"), "v1")
    calls.clear()
    assert (await cache.lookup(req("Which plan includes phone support?"))).hit and calls == ["search"]
    assert (await cache.peek(req("Which plan includes phone support?"))).hit and calls == ["search"]

    # Expiry: the front checks it as the Milvus filter does.
    later = now_ms() + 3_600_000 + 1
    assert not (await cache.peek(req("How do I reset my password?"), at_ms=later)).hit

    # The model's live version is v2 now: v1 answers are not served (nor by Milvus).
    cache.versions.observe(Heartbeat(pool="vllm", worker_id="w", model_versions={"sy-tiny": "v2"}))
    assert not (await cache.peek(req("How do I reset my password?"))).hit
    cache.versions = LiveVersions()

    # This replica's purge: gone from Milvus and the front.
    assert await cache.purge(Purge(tenant="acme", entry_id=out.entry.id)) >= 1
    assert not (await cache.peek(req("How do I reset my password?"))).hit

    # Another replica purged (Milvus is done): the front drops what it holds on the broadcast.
    assert len(cache.front) == 1
    assert await cache.purge(Purge(tenant="acme"), milvus=False) == 1
    assert len(cache.front) == 0

    # An adapter version deleted: its entries leave the front with Milvus'.
    await stored_v(cache, req("Summarise the plan", adapter=("support", 2)), "v1")
    assert (await cache.peek(req("Summarise the plan", adapter=("support", 2)))).hit
    ev = AdapterEvent(type=AdapterEvent.TYPE_VERSION_DELETED, name="support", version=2)
    ev.versions.append(AdapterVersion(version=1))
    assert await cache.on_adapter_event(ev) >= 1
    assert len(cache.front) == 0
    assert not (await cache.peek(req("Summarise the plan", adapter=("support", 2)))).hit


def test_a_front_fill_that_raced_an_invalidation_is_refused() -> None:
    """A lookup's Milvus query can be out while a purge runs and come back with the purged entry:
    the fill names the generation it started at and is refused."""
    front = ExactFront(2)
    e = Entry(id="e1", prompt="p", response=b"", request_id="r", expires_ms=now_ms() + 60_000, model="m")
    gen = front.generation
    front.drop(Purge(model="m"))
    assert not front.put("acme", "k1", e, gen) and front.get("acme", "k1") is None
    assert front.put("acme", "k1", e, front.generation) and front.get("acme", "k1") is e
    for k in ("k2", "k3"):  # bounded: least recently used goes first
        front.put("acme", k, e, front.generation)
    assert front.get("acme", "k1") is None and len(front) == 2 and front.evicted == 1


def test_the_embedded_server_collects_garbage_less_often(milvus: EmbeddedMilvus) -> None:
    """Milvus' GC helper caps Go's GC target at 200 by default: a collection every ~80 searches,
    each a search latency spike on a small host. The embedded server runs with MAX_GOGC."""
    from shared.devstack.embedded.milvus import MAX_GOGC

    log = milvus.log_path.read_text(errors="replace")
    started = [line for line in log.splitlines() if "GC Helper initialized" in line]
    assert started, "the GC helper did not start"
    assert f"[maximumGOGC={MAX_GOGC}]" in started[-1]
