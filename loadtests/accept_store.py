"""accept-store: async accepts per second with the gateway's state on Redis and on SQLite.

`POST /v1/requests` writes the request to the gateway's result store (the idempotency key, the
tenant's queue quota and the row in one step) and to `sy.requests` before it answers 202. The
store is the embedded Redis by default (SY_GATEWAY_STATE_URL, shared by replicas) or a SQLite
file per replica (SY_GATEWAY_STATE_URL unset). The gateway and the broker run alone (nothing
downstream competes for the cores), alternately on each store, twice each, and a minimal
FastAPI/uvicorn endpoint gives the host's ceiling; every accepted request is counted in the
broker's log (nothing lost).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from loadtests.capacity import accept_rate, minimal_app, queued_accepts
from loadtests.harness.stack import pipeline, sy_tiny, var_dir
from loadtests.pipeline import API_KEY

STORES = {"redis": {}, "sqlite": {"SY_GATEWAY_STATE_URL": ""}}


async def one_run(model_dir: Path, var: Path, store: str, accepts: int) -> dict[str, Any]:
    with pipeline(
        model_dir,
        var,
        cache=False,
        services=["gateway"],
        stop_timeout_s=60,
        SY_TENANT_MAX_QUEUED="100000",
        **STORES[store],
    ) as stack:
        await accept_rate(stack.url, API_KEY, 50, poll=False)  # warm: connections, scripts
        got = await queued_accepts(stack.url, str(stack.endpoints["kafka"]), accepts)
        got["store"] = store
        return got


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    model_dir = sy_tiny()
    var = var_dir(out, "accept-store-var")
    accepts = 300 if quick else 2000
    runs = [await one_run(model_dir, var, store, accepts) for _ in range(2) for store in STORES]
    with minimal_app() as murl:
        minimal = [await accept_rate(murl, "none", accepts, poll=False) for _ in range(2)]
    med = {
        s: round(statistics.median(r["accepted_per_s"] for r in runs if r["store"] == s), 1) for s in STORES
    }
    floor = round(statistics.median(m["accepted_per_s"] for m in minimal), 1)
    summary = {
        "redis_accepted_per_s": med["redis"],
        "sqlite_accepted_per_s": med["sqlite"],
        "minimal_fastapi_accepted_per_s": floor,
        "redis_vs_sqlite": round(med["redis"] / med["sqlite"], 3),
        "redis_vs_minimal": round(med["redis"] / floor, 3),
        "lost": sum(r["lost"] for r in runs),
    }
    return {
        "scenario": "accept-store",
        "workload": {"submissions": accepts, "concurrency": 32, "runs_per_store": 2},
        "runs": runs,
        "minimal_fastapi": minimal,
        "summary": summary,
    }
