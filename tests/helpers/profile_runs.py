"""Recorded profile runs made up for the report's tests (the shape runner.py records).

`two_pools()` is the case that fooled the old report: 65% of requests on vLLM, 35% on Triton
(slower per request), every request held 27 ms in the cache stage. The sum of stage medians
across both pools is far above any real median, and the largest stage median is Triton's.
"""

from __future__ import annotations

import random
from typing import Any

from shared.devstack.profiling.scenarios import SCENARIOS

COMMON_BEFORE = [("gateway_accept", None, 0.5), ("queue", "sy.requests", 2.0), ("cache", None, 27.0)]


def request(
    t: float,
    pool: str,
    worker_ms: float,
    *,
    hop_ms: float = 2.0,
    cache_ms: float = 27.0,
    adapter: str | None = None,
    adapter_load: bool = False,
    hit: bool = False,
) -> dict[str, Any]:
    """One completed streamed request through `pool` (a cache hit skips router and worker)."""
    rows: list[dict[str, Any]] = [
        {"stage": "gateway_accept", "duration_ms": 0.5},
        {"stage": "queue", "topic": "sy.requests", "duration_ms": hop_ms},
        {"stage": "cache", "duration_ms": cache_ms},
    ]
    if not hit:
        rows += [
            {"stage": "queue", "topic": "sy.routing", "duration_ms": 2.0},
            {"stage": "router", "duration_ms": 1.0},
            {"stage": "queue", "topic": f"sy.infer.{pool}", "duration_ms": 3.0},
            {"stage": f"{pool}_worker", "duration_ms": worker_ms},
            {"stage": "ttft", "parent": f"{pool}_worker", "duration_ms": 10.0},
            {"stage": "decode", "parent": f"{pool}_worker", "duration_ms": worker_ms - 10, "itl_ms": "2,3,4"},
        ]
        if adapter_load:
            rows.append({"stage": "adapter_load", "parent": f"{pool}_worker", "duration_ms": 40.0})
    rows += [
        {"stage": "queue", "topic": "sy.responses", "duration_ms": 2.0},
        {"stage": "gateway_reply", "duration_ms": 0.5},
    ]
    total = sum(r["duration_ms"] for r in rows if "parent" not in r)
    info: dict[str, Any] = {
        "breakdown": rows,
        "pool": pool,
        "adapter": adapter,
        "e2e_ms": total,
        "stages_total_ms": total,
    }
    if hit:
        info["cache"] = {"hit": True, "tier": "exact"}
    return {
        "start": t,
        "end": t + (total + 1.0) / 1000,
        "status": 200,
        "ttft_ms": 15.0,
        "chunk_gaps_ms": [5.0],
        "tokens": 8,
        "e2e_ms": total + 1.0,  # the client's 1 ms outside the breakdown
        "model": adapter.split("@")[0] if adapter else "sy-tiny",
        "switchyard": info,
    }


def run_of(
    reqs: list[dict[str, Any]], samples: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "scenario": SCENARIOS["smoke"].model_dump(),
        "gateway": "http://127.0.0.1:9",
        "client": {"tenant": "acme", "api_key": "sk-acm… (12 chars)", "source": "--tenant"},
        "started": 100.0,
        "finished": 112.0,
        "requests": reqs,
        "samples": samples if samples is not None else lag_samples(),
        **extra,
    }


def lag_samples() -> list[dict[str, Any]]:
    return [
        {"t": 100 + i, "service": "preprocess", "series": {"sy_consumer_lag{stage=preprocess}": float(i % 3)}}
        for i in range(12)
    ] + [
        {"t": 100 + i, "service": "vllm_worker", "series": {"vllm:num_preemptions_total{}": float(i // 4)}}
        for i in range(12)
    ]


def two_pools(n: int = 200, seed: int = 3) -> dict[str, Any]:
    """65% vLLM (worker ~40 ms), 35% Triton (worker ~70 ms), a 27 ms cache hold on every request."""
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        t = 100 + i * 0.05
        if rng.random() < 0.35:
            reqs.append(request(t, "triton", rng.gauss(70, 6)))
        else:
            reqs.append(request(t, "vllm", rng.gauss(40, 4)))
    return run_of(reqs)
