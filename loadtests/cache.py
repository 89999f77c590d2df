"""cache: what the semantic cache costs and saves, in one run.

(a) End to end through the gateway (`switchyard up` with the cache on, embedded broker, embedded
    Milvus standalone 2.3.5 from the `milvus` wheel): latency of misses (served by the vLLM
    worker), then of exact hits (the same requests again) and of semantic hits (fow-cache
    paraphrases of them that the verifier accepts). Non-streaming chat, temperature 0.
(b) Lookup latency against the same kind of Milvus server with 10k and 100k entries (spread over
    tenants and scopes; vectors are MiniLM embeddings of prompts plus noise, so the index holds
    realistic neighbourhoods): Milvus search alone, the exact-tier query, and the whole
    `SemanticCache.lookup` (exact → embed → search → verify).
(c) MiniLM embedding latency: one prompt per call vs batches of 32, and the `BatchingEmbedder`
    under 32 concurrent lookups; on ONNX Runtime (the service's default) and on torch.
Targets (issue #5): hit end-to-end p50 ≤ 20 ms; lookup p99 ≤ 10 ms at 100k entries.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import openai

from .harness.report import pct
from .harness.stack import ROOT, models_dir, pipeline, sy_tiny, var_dir

MILVUS = "Milvus standalone 2.3.5 (PyPI `milvus`, embedded server), pymilvus 3.0.2"


def summary_ms(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "p50_ms": round(pct(xs, 0.5), 3),
        "p99_ms": round(pct(xs, 0.99), 3),
        "mean_ms": round(statistics.fmean(xs), 3) if xs else float("nan"),
    }


def paraphrase_pairs(n: int) -> list[tuple[str, str]]:
    """fow-cache should-hit pairs (a, b) the verifier accepts at the default floor."""
    from fow_cache.data import load_questions

    from services.cache.verify import Verifier

    v = Verifier()
    out = []
    for p in load_questions():
        if p["same_answer"] and p["a"] != p["b"] and v.check(p["b"], p["a"], 0.99).ok:
            out.append((str(p["a"]), str(p["b"])))
    return out[:n]


async def _chat(client: openai.AsyncOpenAI, text: str) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    r = await client.chat.completions.create(
        model="sy-tiny",
        messages=[{"role": "user", "content": text}],
        max_tokens=16,
        temperature=0,
    )
    ms = (time.perf_counter() - t0) * 1000
    return ms, (r.model_extra or {}).get("switchyard") or {}


async def end_to_end(model_dir: Path, var_dir: Path, n: int) -> dict[str, Any]:
    # A collection of its own: the var dir (and Milvus' data in it) is kept between runs, so a
    # shared collection would still hold the last run's answers and its "misses" would be hits.
    collection = f"sy_cache_bench_{time.time_ns()}"
    pairs = paraphrase_pairs(n)
    with pipeline(model_dir, var_dir, cache=True, SY_MILVUS_COLLECTION=collection) as stack:
        try:
            client = openai.AsyncOpenAI(
                base_url=stack.url, api_key="sk-switchyard-local", max_retries=0, timeout=120
            )
            await _chat(client, "warm-up: what is 1+1?")
            miss, exact, semantic, sem_hits, tiers, peeked = [], [], [], 0, [], 0
            parts: dict[str, dict[str, list[float]]] = {"exact": {}, "semantic": {}}
            for a, _ in pairs:
                ms, info = await _chat(client, a)
                miss.append(ms)
                tiers.append((info.get("cache") or {}).get("hit", False))
            await written_back(var_dir, len(pairs))
            # Exact repeats first, then the paraphrases: a paraphrase the verifier refuses is generated
            # and written back, which would land in the middle of the next exact hit's measurement.
            for a, _ in pairs:
                ms, info = await _chat(client, a)
                if (info.get("cache") or {}).get("tier") == "exact":
                    exact.append(ms)
                    _parts(parts["exact"], info, ms)
                    peeked += any(row["stage"] == "cache_peek" for row in info.get("breakdown", []))
            for _, b in pairs:
                ms, info = await _chat(client, b)
                if (info.get("cache") or {}).get("tier") == "semantic":
                    semantic.append(ms)
                    sem_hits += 1
                    _parts(parts["semantic"], info, ms)
            await client.close()
        finally:
            drop_collection(var_dir, collection)

    return {
        "requests": len(pairs),
        "miss": summary_ms(miss),
        "exact_hit": summary_ms(exact),
        "semantic_hit": summary_ms(semantic),
        "semantic_hits_of_paraphrases": f"{sem_hits}/{len(pairs)}",
        "first_pass_hits": sum(tiers),
        # Exact hits the gateway's peek answered (the rest: the pipeline's cache stage was first).
        "exact_hits_answered_by_peek": f"{peeked}/{len(exact)}",
        "collection": collection,
        "hit_vs_miss_p50": round(pct(exact, 0.5) / pct(miss, 0.5), 3) if exact and miss else None,
        # Where a hit's time goes (p50 of each breakdown row; `client_http` = what the client
        # measured beyond the server's e2e: the HTTP round trip and the openai client's parsing).
        "hit_breakdown_p50_ms": {
            tier: {k: round(statistics.median(v), 2) for k, v in rows.items()} for tier, rows in parts.items()
        },
    }


async def written_back(var_dir: Path, n: int, timeout_s: float = 60) -> None:
    """Wait until the cache service stored `n` entries (its write-back reads sy.responses)."""
    import httpx

    url = json.loads((var_dir / "run" / "endpoints.json").read_text())["services"]["cache"]["url"]
    deadline = time.monotonic() + timeout_s
    from shared.runtime.admin import admin_headers
    from shared.runtime.config import load_settings

    async with httpx.AsyncClient(timeout=10, headers=admin_headers(load_settings())) as http:
        while time.monotonic() < deadline:
            if (await http.get(url + "/v1/cache/stats")).json().get("stored", 0) >= n:
                return
            await asyncio.sleep(0.2)
    print(f"cache stored fewer than {n} entries after {timeout_s:.0f}s")


def drop_collection(var_dir: Path, collection: str) -> None:
    """Drop the run's collection in the stack's Milvus (named in the launcher's endpoints file)."""
    from pymilvus import MilvusClient

    try:
        uri = json.loads((var_dir / "run" / "endpoints.json").read_text())["milvus"]
        client = MilvusClient(uri=uri, timeout=30)
        client.drop_collection(collection)
        client.close()
    except Exception as exc:  # noqa: BLE001 - a leftover collection costs disk, not the figures
        print(f"could not drop {collection}: {exc!r}")


def _parts(into: dict[str, list[float]], info: dict[str, Any], client_ms: float) -> None:
    for row in info.get("breakdown", []):
        name = row["stage"] if row["stage"] != "queue" else f"hop:{row['topic']}"
        into.setdefault(name, []).append(float(row["duration_ms"]))
    if "e2e_ms" in info:
        into.setdefault("client_http", []).append(client_ms - float(info["e2e_ms"]))


def _env(i: int, text: str, tenant: str) -> Any:
    from switchyard.v1.envelope_pb2 import ChatMessage, Request, SamplingParams

    from shared.runtime.envelope import Envelope, Kind

    return Envelope(
        request_id=f"b-{i}",
        tenant=tenant,
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        request=Request(
            messages=[ChatMessage(role="user", content=text)], sampling=SamplingParams(temperature=0)
        ),
    )


def wait_indexed(store: Any, size: int, timeout_s: float = 900) -> dict[str, Any]:
    """Wait until Milvus has indexed every row (describe_index: indexed_rows, pending rows)."""
    t0 = time.perf_counter()
    name = (store.client.list_indexes(store.collection) or ["vector"])[0]
    info: dict[str, Any] = {}
    while time.perf_counter() - t0 < timeout_s:
        info = store.client.describe_index(store.collection, name) or {}
        if int(info.get("indexed_rows", 0)) >= size and int(info.get("pending_index_rows", 1)) == 0:
            break
        time.sleep(1.0)
    return {
        "wait_s": round(time.perf_counter() - t0, 1),
        "indexed_rows": int(info.get("indexed_rows", 0)),
        "state": info.get("state"),
    }


def service_encoder() -> Any:
    """The embedder the cache service runs by default: MiniLM on ONNX Runtime, one thread."""
    from services.cache.embed import load_onnx_minilm

    return load_onnx_minilm(models_dir(), threads=1)


async def lookups(var_dir: Path, sizes: list[int], probes: int, warmup: int = 0) -> dict[str, Any]:
    from services.cache.embed import BatchingEmbedder
    from services.cache.keys import cache_key
    from services.cache.lookup import SemanticCache
    from services.cache.policy import CachePolicy
    from services.cache.store import STATS_FIELD, CacheStore
    from shared.devstack.embedded.milvus import EmbeddedMilvus

    encode = service_encoder()
    base_texts = [a for a, _ in paraphrase_pairs(300)] or ["How do I reset my password?"]
    base = encode(base_texts)
    rng = np.random.default_rng(5)
    server = EmbeddedMilvus(var_dir / "milvus-bench")
    server.start()
    out: dict[str, Any] = {"server": MILVUS}
    try:
        for size in sizes:
            store = CacheStore(server.uri, collection=f"bench_{size}_{int(time.time())}")
            store.ensure()
            t0 = time.perf_counter()
            batch: list[dict[str, Any]] = []
            for i in range(size):
                tenant = f"t{i % 8}"
                key = cache_key(_env(i, f"{base_texts[i % len(base_texts)]} #{i}", tenant))
                v = base[i % len(base)] + rng.normal(0, 0.05, base.shape[1]).astype(np.float32)
                v /= np.linalg.norm(v)
                row = dict(key.scope())
                row.update(
                    id=f"e{i}",
                    exact_key=key.exact,
                    request_id=f"b-{i}",
                    prompt=key.text,
                    response="",
                    created_ms=0,
                    expires_ms=2**62,
                    vector=v.tolist(),
                    model_version="v1",
                )
                row[STATS_FIELD] = ""  # no checked reuses yet (services/cache/budget.py)
                batch.append(row)
                if len(batch) == 2000:
                    store.client.insert(store.collection, batch)
                    batch = []
            if batch:
                store.client.insert(store.collection, batch)
            store.client.flush(store.collection)
            insert_s = time.perf_counter() - t0
            # Probe the steady state: the HNSW build after a bulk insert takes the cores for a while.
            indexed = wait_indexed(store, size)
            # recent=0: every lookup embeds its prompt (the warm-up saw the same texts).
            cache = SemanticCache(
                store, BatchingEmbedder(encode, window_ms=0, recent=0), CachePolicy(floor=0.8)
            )
            search_ms, full_ms = [], []
            parts: dict[str, list[float]] = {}  # the lookup's own rows (cache_embed: from its start)
            # The first few hundred searches after the index loads run slower (scattered 5-10 ms
            # ones, seen with the server otherwise idle): a warm-up round, not counted.
            # The bare search and the lookups in two rounds: a search just before each lookup
            # would both warm the lookup's search and load the server under it.
            for j in range(-warmup, probes):
                env = _env(10**9 + j, base_texts[j % len(base_texts)], "t0")
                t = time.perf_counter()
                store.search(cache_key(env), base[j % len(base)], 5)
                if j >= 0:
                    search_ms.append((time.perf_counter() - t) * 1000)
            for j in range(-warmup, probes):
                env = _env(10**9 + j, base_texts[j % len(base_texts)], "t0")
                t = time.perf_counter()
                found = await cache.lookup(env)
                if j >= 0:
                    full_ms.append((time.perf_counter() - t) * 1000)
                    for stage, start, end, _ in found.timings:
                        parts.setdefault(stage, []).append((end - start) / 1e6)
            out[str(size)] = {
                "insert_s": round(insert_s, 2),
                "index": indexed,
                "warmup_probes": warmup,
                "milvus_search": summary_ms(search_ms),
                "lookup_total": summary_ms(full_ms),
                "lookup_parts": {stage: summary_ms(xs) for stage, xs in parts.items()},
            }
            store.drop()
            store.close()
    finally:
        server.stop()
    return out


async def embeddings(reps: int) -> dict[str, Any]:
    """The service's embedder (ONNX Runtime), with the torch one beside it for comparison."""
    from services.cache.embed import load_minilm

    texts = [a for a, _ in paraphrase_pairs(64)]
    out = await embedding_latency(service_encoder(), texts, reps)
    out["torch_sentence_transformers"] = await embedding_latency(load_minilm(threads=1), texts, reps)
    return out


async def embedding_latency(encode: Any, texts: list[str], reps: int) -> dict[str, Any]:
    from services.cache.embed import BatchingEmbedder

    encode(texts[:8])
    single = []
    for i in range(reps):
        t = time.perf_counter()
        encode([texts[i % len(texts)]])
        single.append((time.perf_counter() - t) * 1000)
    batched = []
    for _ in range(max(3, reps // 10)):
        t = time.perf_counter()
        encode(texts[:32])
        batched.append((time.perf_counter() - t) * 1000)
    emb = BatchingEmbedder(encode, max_batch=32, window_ms=1.0)
    t = time.perf_counter()
    await asyncio.gather(*(emb.embed(x) for x in texts[:32]))
    concurrent_ms = (time.perf_counter() - t) * 1000
    return {
        "single": summary_ms(single),
        "batch_of_32": summary_ms(batched),
        "per_prompt_in_batch_of_32_p50_ms": round(pct(batched, 0.5) / 32, 3),
        "batching_embedder_32_concurrent_ms": round(concurrent_ms, 2),
        "batching_embedder_batches": emb.batches,
    }


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    var = var_dir(out, "cache-var")
    sizes = [1_000, 10_000] if quick else [10_000, 100_000]
    result: dict[str, Any] = {
        "scenario": "cache",
        "embedder": "all-MiniLM-L6-v2 on ONNX Runtime, one thread (the service's default; torch beside it)",
        "lookup": await lookups(var, sizes, 50 if quick else 1000, warmup=20 if quick else 300),
        "end_to_end": await end_to_end(sy_tiny(), var, 10 if quick else 40),
    }
    # Last: it loads torch (the sentence-transformers comparison) into this process, which the
    # cache service never does; the lookups above run as they do in the service.
    result["embedding"] = await embeddings(30 if quick else 200)
    big = result["lookup"][str(sizes[-1])]
    e2e = result["end_to_end"]
    result["summary"] = {
        "milvus": MILVUS,
        "hit_e2e_p50_ms": {"exact": e2e["exact_hit"]["p50_ms"], "semantic": e2e["semantic_hit"]["p50_ms"]},
        "miss_e2e_p50_ms": e2e["miss"]["p50_ms"],
        # Both tiers' hits count: the target is met only when each is within it.
        "target_hit_e2e_p50_le_20ms": {
            tier: e2e[f"{tier}_hit"]["p50_ms"] <= 20 for tier in ("exact", "semantic")
        },
        f"lookup_p99_ms_at_{sizes[-1]}": big["lookup_total"]["p99_ms"],
        f"milvus_search_p99_ms_at_{sizes[-1]}": big["milvus_search"]["p99_ms"],
        # The target counts the whole lookup (exact tier, embedding, search, verifier); Milvus'
        # own search is flagged beside it.
        "target_lookup_p99_le_10ms": big["lookup_total"]["p99_ms"] <= 10,
        "milvus_search_p99_le_10ms": big["milvus_search"]["p99_ms"] <= 10,
        "embed_single_p50_ms": result["embedding"]["single"]["p50_ms"],
        "embed_per_prompt_batched_p50_ms": result["embedding"]["per_prompt_in_batch_of_32_p50_ms"],
        "embed_single_p50_ms_torch": result["embedding"]["torch_sentence_transformers"]["single"]["p50_ms"],
    }
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(ROOT / "var" / "bench", quick=True)), indent=2))
