"""The cache service as a process: real broker, real embedded Milvus, MiniLM.

A miss goes on to sy.routing; the worker's answer on sy.responses is written back; a paraphrase
is then answered on sy.responses by the cache itself (never for another tenant, not even the
exact prompt); a heartbeat reporting new weights for the
model makes the same request a miss again; per-tenant floors through the API persist.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx
from switchyard.v1.envelope_pb2 import Choice, Response, Usage
from switchyard.v1.events_pb2 import Heartbeat

from shared.devstack.embedded.milvus import EmbeddedMilvus
from shared.runtime.envelope import Envelope, decode, encode
from tests.helpers.envelopes import chat
from tests.helpers.kafka import ServiceProc, collect, produce, service_env, services

MODELS_DIR = Path(os.environ.get("TEST_MODELS_DIR") or Path(__file__).resolve().parents[2] / "var" / "models")

TOKEN = "cache-test-token"


def wait_stats(port: int, until, timeout_s: float = 30.0) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = httpx.get(f"http://127.0.0.1:{port}/v1/cache/stats").json()
        if until(s):
            return s
        time.sleep(0.1)
    raise TimeoutError(s)


async def test_cache_service_miss_writeback_hit_and_model_version(
    broker, topics, var_dir: Path, milvus: EmbeddedMilvus
) -> None:
    env = service_env(
        broker.bootstrap,
        topics,
        var_dir,
        SY_MILVUS_URI=milvus.uri,
        SY_MILVUS_COLLECTION=f"svc_{int(time.time())}",
        SY_INTERNAL_TOKEN=TOKEN,
        SY_MODELS_DIR=str(MODELS_DIR),  # the ONNX MiniLM `switchyard models build` exported
    )
    # Ready once MiniLM is loaded and Milvus answers (the /readyz check `cache_store`).
    with services(["cache"], env, var_dir, ready_timeout_s=180) as procs:
        port = procs["cache"].port
        # 1. A miss goes on to the router.
        await produce(
            broker.bootstrap, f"{topics}prepared", [encode(chat("q1", "How do I reset my password?"))]
        )
        [miss] = await collect(broker.bootstrap, f"{topics}routing", 1)
        got = decode(miss.value)
        assert got.request_id == "q1" and not got.cache.hit
        # 2. The worker's answer (weights v1) is written back from sy.responses.
        got.response.CopyFrom(
            Response(
                choices=[Choice(text="Settings > Security > Reset", finish_reason="stop")],
                usage=Usage(prompt_tokens=5, completion_tokens=4, total_tokens=9),
                pool="vllm",
                model_version="v1",
            )
        )
        await produce(broker.bootstrap, f"{topics}responses", [encode(got)])
        wait_stats(port, lambda s: s.get("stored", 0) >= 1)
        # 2b. The gateway's peek (HTTP, internal token) is the request's whole lookup: the same
        # request is answered with the stored response, and so is a paraphrase (semantic tier);
        # another tenant, a sampled request and a request with an image are not.
        peek_url = f"http://127.0.0.1:{port}/v1/cache/peek"
        auth = {"authorization": f"Bearer {TOKEN}"}

        def peek(e: Envelope, headers: dict[str, str] = auth) -> httpx.Response:
            return httpx.post(peek_url, content=e.SerializeToString(), headers=headers)

        assert peek(chat("p1", "How do I reset my password?"), {}).status_code == 401
        r = peek(chat("p1", "How do I reset my password?"))
        assert r.status_code == 200, r.text
        answered = Envelope.FromString(r.content)
        assert answered.request_id == "p1" and answered.cache.hit and answered.cache.tier == "exact"
        assert answered.response.choices[0].text == "Settings > Security > Reset"
        assert {"cache_peek", "cache_exact"} <= {t.stage for t in answered.timings}
        r = peek(chat("p2", "How can I reset my password?"))
        assert r.status_code == 200 and Envelope.FromString(r.content).cache.tier == "semantic"
        sampled = chat("p5", "How do I reset my password?")
        sampled.request.sampling.ClearField("temperature")
        pictured = chat("p6", "How do I reset my password?")
        pictured.request.messages[0].parts.add(type="image_url").image_url.url = "data:image/png;base64,AA=="
        for e, reason in (
            (chat("p3", "How do I reset my password?", tenant="rival"), "no_candidate"),
            (sampled, "sampled"),
            (pictured, "media"),
        ):
            r = peek(e)
            assert (r.status_code, r.headers.get("x-cache-reason")) == (204, reason), e.request_id
        assert httpx.post(peek_url, content=b"\xff\xff", headers=auth).status_code == 400
        s = httpx.get(f"http://127.0.0.1:{port}/v1/cache/stats").json()
        # Each peek that looked is its request's lookup (the stage reuses it): q1's miss in the
        # stage, then p1, p2 and p3; the sampled and the pictured requests were never looked up.
        counts = [s[k] for k in ("peeks", "peek_hits", "lookups", "hits_exact", "hits_semantic")]
        assert counts == [5, 2, 4, 1, 1]
        # 3. A paraphrase is answered by the cache, on sy.responses, with the stored answer.
        await produce(
            broker.bootstrap, f"{topics}prepared", [encode(chat("q2", "How can I reset my password?"))]
        )
        recs = await collect(
            broker.bootstrap,
            f"{topics}responses",
            0,
            until=lambda rs: any(decode(r.value).request_id == "q2" for r in rs),
        )
        hit = next(decode(r.value) for r in recs if decode(r.value).request_id == "q2")
        assert hit.cache.hit and hit.cache.tier == "semantic" and hit.cache.similarity > 0.9
        assert hit.response.choices[0].text == "Settings > Security > Reset"
        stages = [t.stage for t in hit.timings]
        assert "cache" in stages and {"cache_embed", "cache_search", "cache_verify"} <= set(stages)
        # 3b. Another tenant asking the same, or a near-duplicate, is never served acme's answer:
        # both go on to the router as misses.
        await produce(
            broker.bootstrap,
            f"{topics}prepared",
            [
                encode(chat("r1", "How do I reset my password?", tenant="rival")),
                encode(chat("r2", "How can I reset my password?", tenant="rival")),
            ],
        )
        recs = await collect(
            broker.bootstrap,
            f"{topics}routing",
            0,
            until=lambda rs: {"r1", "r2"} <= {decode(r.value).request_id for r in rs},
        )
        rival = [decode(r.value) for r in recs if decode(r.value).request_id in ("r1", "r2")]
        assert len(rival) == 2 and not any(e.cache.hit for e in rival)
        # 4. The model is rebuilt: its workers report v2, the v1 answer is neither served nor kept.
        await produce(
            broker.bootstrap,
            f"{topics}heartbeats",
            [
                Heartbeat(
                    pool="vllm", worker_id="w", model_versions={"sy-tiny": "v2"}, sent_unix_ns=time.time_ns()
                ).SerializeToString()
            ],
        )
        wait_stats(port, lambda s: s.get("invalidated", 0) >= 1)
        await produce(
            broker.bootstrap, f"{topics}prepared", [encode(chat("q3", "How can I reset my password?"))]
        )
        recs = await collect(
            broker.bootstrap,
            f"{topics}routing",
            0,
            until=lambda rs: any(decode(r.value).request_id == "q3" for r in rs),
        )
        assert not next(decode(r.value) for r in recs if decode(r.value).request_id == "q3").cache.hit
        assert peek(chat("p7", "How do I reset my password?")).status_code == 204  # nor by a peek
        stats = httpx.get(f"http://127.0.0.1:{port}/v1/cache/stats").json()
        assert stats["hits_semantic"] == 2 and stats["hits_exact"] == 1 and stats["hit_rate"]["semantic"] > 0
        assert stats["lookup_ms"]["p50"] is not None and stats["entries"] == 0

        # 5. Per-tenant floor through the API: token required, validated, persisted, reloaded.
        url = f"http://127.0.0.1:{port}/v1/cache/tenants/acme"
        assert httpx.put(url, json={"similarity_floor": 0.95}).status_code == 401
        bad = httpx.put(url, json={"similarity_floor": 1.5}, headers=auth)
        assert bad.status_code == 400 and "similarity_floor" in bad.json()["error"]["message"]
        ok = httpx.put(url, json={"similarity_floor": 0.95}, headers=auth)
        assert ok.status_code == 200 and ok.json()["similarity_floor"] == 0.95
        assert httpx.get(url).json()["similarity_floor"] == 0.95
        saved = json.loads((var_dir / "objects" / "cache" / "tenant-floors.json").read_bytes())
        assert saved == {"acme": 0.95}
        assert httpx.delete(url, headers=auth).json()["similarity_floor"] == 0.8


async def test_a_purge_through_one_replica_reaches_the_other_replicas_memory(
    broker, topics, var_dir: Path, milvus: EmbeddedMilvus
) -> None:
    """Two cache replicas on one collection: both hold an entry in their in-memory exact tier
    (one wrote it back, the other found it in Milvus); a purge through replica A's API is
    broadcast on sy.cache.purges and replica B stops answering from memory too."""
    env = service_env(
        broker.bootstrap,
        topics,
        var_dir,
        SY_MILVUS_URI=milvus.uri,
        SY_MILVUS_COLLECTION=f"svc_purge_{int(time.time())}",
        SY_INTERNAL_TOKEN=TOKEN,
        SY_MODELS_DIR=str(MODELS_DIR),
    )
    a = ServiceProc(
        [sys.executable, "-m", "services.cache.main"], dict(env, SY_INSTANCE_ID="cache-a"), var_dir / "a.log"
    )
    b = ServiceProc(
        [sys.executable, "-m", "services.cache.main"], dict(env, SY_INSTANCE_ID="cache-b"), var_dir / "b.log"
    )
    try:
        a.wait_ready(180)
        b.wait_ready(180)
        answer = chat("q1", "How do I reset my password?")
        answer.response.CopyFrom(
            Response(choices=[Choice(text="Settings > Security > Reset", finish_reason="stop")], pool="vllm")
        )
        await produce(broker.bootstrap, f"{topics}responses", [encode(answer)])  # one replica stores it
        deadline = time.monotonic() + 30
        while sum(wait_stats(p.port, lambda s: True).get("stored", 0) for p in (a, b)) < 1:
            assert time.monotonic() < deadline, "not written back"
            time.sleep(0.1)
        auth = {"authorization": f"Bearer {TOKEN}"}

        def peek(p: ServiceProc, rid: str) -> httpx.Response:
            e = chat(rid, "How do I reset my password?")
            return httpx.post(
                f"http://127.0.0.1:{p.port}/v1/cache/peek", content=e.SerializeToString(), headers=auth
            )

        for p in (a, b):  # the replica that did not write it finds it in Milvus, then keeps it
            assert peek(p, "p1").status_code == 200
            assert peek(p, "p2").status_code == 200
        sb = wait_stats(b.port, lambda s: True)
        assert sb["front_entries"] == 1 and sb["front_hits"] >= 1

        r = httpx.delete(f"http://127.0.0.1:{a.port}/v1/cache/entries?tenant=acme", headers=auth)
        assert r.status_code == 200 and r.json()["deleted"] == 1
        assert (
            httpx.delete(f"http://127.0.0.1:{a.port}/v1/cache/entries?tenant=", headers=auth).status_code
            == 400
        )
        wait_stats(b.port, lambda s: s["front_entries"] == 0, timeout_s=10)
        for p in (a, b):
            r = peek(p, "p3")
            assert (r.status_code, r.headers.get("x-cache-reason")) == (204, "no_candidate")
    finally:
        a.stop()
        b.stop()
