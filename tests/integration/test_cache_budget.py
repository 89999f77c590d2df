"""The error budget and shadow mode against the real embedded Milvus (and broker): a planted false
hit is found by its shadow check through the cache service, the metric moves, the client has one
reply, the entry's threshold tightens (others do not); the outcomes live in the entry's Milvus row
(another replica sees them); a collection from before the `stats` field keeps working."""

from __future__ import annotations

import itertools
import os
import re
import time
from pathlib import Path

import httpx
import pytest
from pymilvus import DataType
from switchyard.v1.envelope_pb2 import Choice, Response

from services.cache.embed import DIM, BatchingEmbedder, load_onnx_minilm
from services.cache.lookup import SemanticCache
from services.cache.policy import CachePolicy
from services.cache.shadow import Checks
from services.cache.store import CacheStore
from services.gateway.reader import ReplyHandler
from services.gateway.replies import ReplyRouter
from services.gateway.requests.sqlite_store import SqliteResultStore
from shared.devstack.embedded.milvus import EmbeddedMilvus
from shared.runtime.bus import JOB_HEADER, header
from shared.runtime.config import load_settings
from shared.runtime.envelope import Envelope, decode, encode
from shared.runtime.stage import Emit, out_record
from tests.helpers import envelopes
from tests.helpers.kafka import collect, produce, service_env, services

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = Path(os.environ.get("TEST_MODELS_DIR") or ROOT / "var" / "models")
TOKEN = "budget-test-token"
_n = itertools.count()

PLANTED = "What is 37+58?"  # stored with a wrong answer (96): the engine answers 95
PARAPHRASE = "What's 37+58?"  # cosine 0.988 to it; the verifier passes it
CONTROL, CONTROL_PARAPHRASE = "What is the capital of France?", "What's the capital of France?"


def chat(rid: str, text: str, tenant: str = "acme") -> Envelope:
    return envelopes.chat(rid, text, tenant, max_tokens=8)


def answered(env: Envelope, text: str) -> Envelope:
    env.response.CopyFrom(
        Response(choices=[Choice(text=text, finish_reason="stop")], pool="vllm", model_version="v1")
    )
    return env


def get_stats(port: int, until, timeout_s: float = 30.0) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        s = httpx.get(f"http://127.0.0.1:{port}/v1/cache/stats").json()
        if until(s) or time.monotonic() > deadline:
            assert until(s), s
            return s
        time.sleep(0.1)


def gauge(text: str, name: str, tenant: str = "acme") -> float:
    m = re.search(rf'^{name}\{{tenant="{tenant}"\}} (\S+)$', text, re.M)
    assert m, f"{name} not exported"
    return float(m.group(1))


async def test_shadow_mode_finds_a_planted_false_hit_through_the_cache_service(
    broker, topics, var_dir: Path, milvus: EmbeddedMilvus
) -> None:
    env = service_env(
        broker.bootstrap,
        topics,
        var_dir,
        SY_MILVUS_URI=milvus.uri,
        SY_MILVUS_COLLECTION=f"budget_{int(time.time())}",
        SY_INTERNAL_TOKEN=TOKEN,
        SY_MODELS_DIR=str(MODELS_DIR),
        SY_CACHE_SHADOW_RATE="1",  # every semantic hit is checked
    )
    with services(["cache"], env, var_dir, ready_timeout_s=180) as procs:
        port = procs["cache"].port
        # The planted false hit, and a control entry, written back as the worker's answers.
        await produce(
            broker.bootstrap,
            f"{topics}responses",
            [encode(answered(chat("w1", PLANTED), "96")), encode(answered(chat("w2", CONTROL), "Paris"))],
        )
        get_stats(port, lambda s: s.get("stored", 0) >= 2)

        # A paraphrase through the stage: the cache answers it, and sends its shadow to the router.
        await produce(broker.bootstrap, f"{topics}prepared", [encode(chat("q1", PARAPHRASE))])
        [routed] = await collect(broker.bootstrap, f"{topics}routing", 1)
        shadow = decode(routed.value)
        assert header(routed.headers, JOB_HEADER) == "cache_shadow"
        assert shadow.request_id.startswith("q1:shadow:") and shadow.cache.tier == "shadow"
        assert len(routed.value) < 600  # the request only: no reply, no timings of the hit

        # The engine answers the shadow (the router and a worker would): 95, not the stored 96.
        answered(shadow, "95")
        reply_rec = out_record(Emit(f"{topics}responses", shadow))
        await produce(broker.bootstrap, f"{topics}responses", [reply_rec.value], headers=reply_rec.headers)
        s = get_stats(port, lambda s: s["checks"]["shadow_disagreements"] >= 1)
        assert s["checks"]["shadow_checks"] == 1
        assert s["checks"]["tenants"]["acme"]["estimate"] == 1.0
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert gauge(metrics, "sy_cache_shadow_disagreements_total") == 1.0
        assert gauge(metrics, "sy_cache_shadow_checks_total") == 1.0
        assert gauge(metrics, "sy_cache_false_hit_ratio") == 1.0
        assert gauge(metrics, "sy_cache_false_hit_ratio_upper") == 1.0
        assert 0.0 < gauge(metrics, "sy_cache_false_hit_ratio_lower") < 1.0

        # The gateway's reply reader, fed everything on sy.responses: the client's request gets
        # the cache's answer once; a waiter on the shadow's id would get nothing (job header).
        records = await collect(
            broker.bootstrap, f"{topics}responses", 0, until=lambda rs: len(rs) >= 4, timeout_s=10
        )
        settings = load_settings(topic_prefix=topics, var_dir=var_dir)
        router = ReplyRouter()
        client, nosy = router.register("q1", "acme", False), router.register(shadow.request_id, "acme", False)
        await ReplyHandler(settings, router, SqliteResultStore(var_dir / "results.db")).on_records(records)
        assert client.final.done() and client.final.result().response.choices[0].text == "96"
        assert not nosy.final.done() and router.duplicates == 0
        assert sum(decode(r.value).request_id == "q1" for r in records) == 1

        # The entry's threshold tightened: the same paraphrase (same similarity) is refused now;
        # its exact prompt is still served (the entry itself unchanged), and so is the control's
        # paraphrase.
        auth = {"authorization": f"Bearer {TOKEN}"}

        def peek(rid: str, text: str) -> httpx.Response:
            body = chat(rid, text).SerializeToString()
            return httpx.post(f"http://127.0.0.1:{port}/v1/cache/peek", content=body, headers=auth)

        r = peek("p1", PARAPHRASE)
        assert (r.status_code, r.headers.get("x-cache-reason")) == (204, "below_threshold")
        r = peek("p2", PLANTED)
        assert r.status_code == 200 and Envelope.FromString(r.content).response.choices[0].text == "96"
        r = peek("p3", CONTROL_PARAPHRASE)
        assert r.status_code == 200 and Envelope.FromString(r.content).cache.tier == "semantic"
        # That peek hit was sampled too: its shadow reached the router after the reply.
        routed = await collect(broker.bootstrap, f"{topics}routing", 2)
        assert sorted(decode(r.value).request_id.split(":")[0] for r in routed) == ["p3", "q1"]
        # The shadow's answer was never stored (the write-back stores after it judges: give it time).
        time.sleep(1.0)
        s = get_stats(port, lambda s: True)
        assert (s["stored"], s["entries"]) == (2, 2), s


@pytest.fixture(scope="module")
def encode_fn():  # type: ignore[no-untyped-def]
    return load_onnx_minilm(MODELS_DIR, threads=1)


def make_cache(store: CacheStore, encode_fn) -> SemanticCache:  # type: ignore[no-untyped-def]
    checks = Checks(TOKEN, 1.0)
    return SemanticCache(
        store, BatchingEmbedder(encode_fn), CachePolicy(floor=0.8, ttl_s=3600), checks=checks
    )


async def plant_and_shadow(cache: SemanticCache) -> str:
    """Store the planted false hit, serve its paraphrase, answer the shadow with 95: the entry id."""
    assert await cache.write_back(answered(chat(f"w{next(_n)}", PLANTED), "96")) is None
    out = await cache.lookup(chat("q1", PARAPHRASE))
    assert out.hit and out.tier == "semantic" and out.shadow and out.entry is not None
    shadow = cache.checks.shadow(chat("q1", PARAPHRASE), out.entry.id, out.similarity)
    assert await cache.write_back(answered(shadow, "95")) == "shadow"
    assert cache.checks.counts["shadow_disagreements"] == 1
    return out.entry.id


async def test_the_outcomes_live_in_the_entrys_milvus_row(milvus: EmbeddedMilvus, encode_fn) -> None:  # type: ignore[no-untyped-def]
    store = CacheStore(milvus.uri, collection=f"b_stats_{next(_n)}_{int(time.time())}")
    store.ensure()
    try:
        cache = make_cache(store, encode_fn)
        entry_id = await plant_and_shadow(cache)
        row = store.get(entry_id, "acme")
        assert row is not None and row.stats.endswith(":0:1") and row.response  # rewritten, whole
        assert Response.FromString(row.response).choices[0].text == "96"
        assert store.count() == 1
        # Another replica (nothing in its memory) reads the outcome from Milvus and refuses too.
        replica = make_cache(store, encode_fn)
        again = await replica.lookup(chat("q2", PARAPHRASE))
        assert not again.hit and again.reason == "below_threshold"
        assert (await replica.lookup(chat("q3", PLANTED))).tier == "exact"
        # A purge still removes the rewritten row.
        assert store.sweep(at_ms=2**62) == 1 and store.get(entry_id, "acme") is None
    finally:
        store.drop()
        store.close()


def create_collection_without_stats(store: CacheStore) -> None:
    """The schema as it was before the `stats` field (store.py's ensure() then)."""
    c = store.client
    s = c.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    s.add_field("tenant", DataType.VARCHAR, max_length=64, is_partition_key=True)
    for f, n in (("model", 256), ("adapter", 256), ("context_hash", 32), ("media_hash", 32)):
        s.add_field(f, DataType.VARCHAR, max_length=n)
    for f, n in (("params_hash", 32), ("model_version", 64), ("exact_key", 64), ("request_id", 128)):
        s.add_field(f, DataType.VARCHAR, max_length=n)
    s.add_field("prompt", DataType.VARCHAR, max_length=8192)
    s.add_field("response", DataType.VARCHAR, max_length=65535)
    s.add_field("created_ms", DataType.INT64)
    s.add_field("expires_ms", DataType.INT64)
    s.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    idx = c.prepare_index_params()
    idx.add_index("vector", index_type="HNSW", metric_type="COSINE", params={"M": 16, "efConstruction": 200})
    c.create_collection(
        store.collection, schema=s, index_params=idx, consistency_level="Session", num_partitions=16
    )


async def test_a_collection_from_before_the_stats_field_keeps_working(
    milvus: EmbeddedMilvus, encode_fn
) -> None:  # type: ignore[no-untyped-def]
    store = CacheStore(milvus.uri, collection=f"b_old_{next(_n)}_{int(time.time())}")
    create_collection_without_stats(store)
    try:
        store.ensure()  # kept, not dropped: its entries still serve
        assert not store.has_stats
        cache = make_cache(store, encode_fn)
        entry_id = await plant_and_shadow(cache)  # stores, serves, shadows, judges
        assert store.get(entry_id, "acme") is not None and store.count() == 1
        again = await cache.lookup(chat("q2", PARAPHRASE))  # this replica remembers the outcome
        assert not again.hit and again.reason == "below_threshold"
    finally:
        store.drop()
        store.close()
