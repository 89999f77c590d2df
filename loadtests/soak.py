"""soak: the whole stack as `make run` starts it (broker, Milvus, Triton, every service, cache on)
at a fixed request rate for 30 minutes (`--quick`: 4), to find slow leaks and rare errors.

Every 10 s the resident memory of each service is sampled — its whole process tree, so the vLLM
worker counts with its EngineCore — plus the broker, Milvus and Triton. Growth is the slope of a
least-squares line through a process's samples, in MiB per hour, twice: after the warm-up (the
last four fifths) and in the last third. A leak keeps its slope; warm-up growth (allocator
arenas, tokenizer and prefix caches, first shapes through the engine) fades, so the verdict is on
the last third. Pass: every request answered without error, no process restarted, and no
service's late slope above MAX_SLOPE_MIB_PER_H. Slopes are judged only for runs of at least
JUDGE_SLOPES_AFTER_S: in the 4-minute quick run the last third is 80 s, still inside the vLLM
worker's warm-up, so it reports the slopes and leaves the memory verdict to the full run.

The broker and Milvus are stores: they grow with the data they keep (the embedded broker's memory
storage has no retention; Milvus keeps cache entries until their TTL). Their growth is reported
per request, not judged as a leak; production Kafka and Milvus keep data on disk with retention.

Hostile input (issue 32, loadtests/hostile.py): beside the REST traffic, a plain aiokafka producer
writes 5 % hostile records straight to the ingest topic; at the end each one the broker accepted
must be in sy.dlq exactly once, with a reason.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from shared.devstack.profiling import runner
from shared.devstack.profiling.scenarios import Scenario

from .harness.procs import stack_processes, tree_rss
from .harness.report import slope
from .harness.stack import overrides, sy_tiny, var_dir, whole_stack
from .hostile import HOSTILE_SHARE, Hostile, dlq_verdict, produce_hostile, read_dlq

# A leak of ~9 KiB per request at 2 requests/s; allocator noise on these services is far below.
MAX_SLOPE_MIB_PER_H = 64.0
JUDGE_SLOPES_AFTER_S = 900.0  # a shorter run's last third is still warm-up
SAMPLE_EVERY_S = 10.0


def slope_mib_per_h(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, bytes) in MiB/hour."""
    per_s = slope(points, min_points=3)
    return None if per_s is None else round(per_s * 3600 / 2**20, 2)


async def sample_rss(endpoints_path: Path, rows: list[dict[str, Any]], stop: asyncio.Event) -> None:
    t0 = time.monotonic()
    while not stop.is_set():
        try:
            ep = json.loads(endpoints_path.read_text())
            rows.append(
                {
                    "t": round(time.monotonic() - t0, 1),
                    "rss": {n: tree_rss(p) for n, p in stack_processes(ep).items()},
                }
            )
        except (OSError, ValueError):
            pass
        try:
            await asyncio.wait_for(stop.wait(), timeout=SAMPLE_EVERY_S)
        except TimeoutError:
            pass


STORES = ("broker", "milvus")


def memory_summary(rows: list[dict[str, Any]], warmup_s: float) -> dict[str, dict[str, Any]]:
    names = sorted({n for r in rows for n in r["rss"]})
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        pts = [(r["t"], r["rss"][name]) for r in rows if r["rss"].get(name)]
        late = [p for p in pts if p[0] >= warmup_s]
        if not pts:
            continue
        last_third = [p for p in pts if p[0] >= pts[-1][0] * 2 / 3]
        out[name] = {
            "rss_start_mib": round(pts[0][1] / 2**20, 1),
            "rss_after_warmup_mib": round(late[0][1] / 2**20, 1) if late else None,
            "rss_end_mib": round(pts[-1][1] / 2**20, 1),
            "rss_max_mib": round(max(b for _, b in pts) / 2**20, 1),
            "slope_mib_per_h": slope_mib_per_h(late),
            "late_slope_mib_per_h": slope_mib_per_h(last_third),
        }
    return out


def verdict(
    memory: dict[str, dict[str, Any]],
    errors: dict[str, int],
    restarts: dict[str, Any],
    requests: int,
    judge_slopes: bool = True,
) -> dict[str, Any]:
    services = {n: m for n, m in memory.items() if n not in STORES}
    late = {
        n: m["late_slope_mib_per_h"] for n, m in services.items() if m["late_slope_mib_per_h"] is not None
    }
    worst = max(late.items(), key=lambda kv: kv[1], default=(None, None))
    stores = {
        n: {
            "grew_mib": round(m["rss_end_mib"] - m["rss_start_mib"], 1),
            "kib_per_request": round((m["rss_end_mib"] - m["rss_start_mib"]) * 1024 / max(1, requests), 2),
        }
        for n, m in memory.items()
        if n in STORES
    }
    return {
        "worst_rss_slope": {"process": worst[0], "mib_per_h": worst[1]},
        "rss_slope_after_warmup_mib_per_h": {n: m["slope_mib_per_h"] for n, m in services.items()},
        "rss_slope_last_third_mib_per_h": late,
        "rss_end_mib": {n: m["rss_end_mib"] for n, m in memory.items()},
        "stores_data_growth": stores,
        "max_slope_mib_per_h": MAX_SLOPE_MIB_PER_H,
        "slopes_judged": judge_slopes,
        "passed": not errors
        and not restarts
        and (not judge_slopes or all(v <= MAX_SLOPE_MIB_PER_H for v in late.values())),
    }


def broker_growth(memory: dict[str, dict[str, Any]], valid: int, hostile: list[Hostile]) -> dict[str, Any]:
    """The embedded broker's RSS growth per 1,000 requests (valid REST plus hostile records), and
    per 1,000 valid ones after taking off the hostile bytes it was given (they stay in its log)."""
    m = memory.get("broker")
    if not m:
        return {}
    grew = m["rss_end_mib"] - m["rss_start_mib"]
    hostile_mib = sum(len(h.value) for h in hostile) / 2**20
    return {
        "grew_mib": round(grew, 1),
        "hostile_bytes_mib": round(hostile_mib, 1),
        "mib_per_1000_requests": round(grew * 1000 / max(1, valid + len(hostile)), 2),
        "mib_per_1000_valid_net_of_hostile_bytes": round((grew - hostile_mib) * 1000 / max(1, valid), 2),
    }


async def run(out: Path, quick: bool = False, duration_s: float | None = None) -> dict[str, Any]:
    duration = duration_s or (240.0 if quick else 1800.0)
    sc = Scenario(
        name="soak",
        mode="rate",
        rate_rps=2.0,
        duration_s=duration,
        max_tokens=(16, 48),
        cache_hit_ratio=0.3,
        stream=True,
    )
    rows: list[dict[str, Any]] = []
    stop = asyncio.Event()
    prefix = overrides().get("SY_TOPIC_PREFIX", "sy.")
    hostile: list[Hostile] = []
    refused: list[str] = []
    with whole_stack(sy_tiny(), var_dir(out, "soak-var")) as stack:
        kafka = stack.endpoints["kafka"]
        sampler = asyncio.create_task(sample_rss(stack.endpoints_path, rows, stop))
        hostile_rps = sc.rate_rps * HOSTILE_SHARE / (1 - HOSTILE_SHARE)
        producer = asyncio.create_task(
            produce_hostile(kafka, f"{prefix}requests", hostile_rps, duration, hostile, refused)
        )
        try:
            data = await runner.run(
                sc, stack.url.removesuffix("/v1"), {}, "sk-switchyard-local", progress=False
            )
            await producer
        finally:
            producer.cancel()
        stop.set()
        await sampler
        letters = await read_dlq(kafka, f"{prefix}dlq", {h.sha256 for h in hostile})
        stack.reread()
    reqs = data["requests"]
    errors: dict[str, int] = {}
    for r in reqs:
        if r["status"] != 200 or "error" in r:
            key = f"{r['status']} {str(r.get('error', ''))[:80]}".strip()
            errors[key] = errors.get(key, 0) + 1
    restarts = stack.restarts()
    memory = memory_summary(rows, warmup_s=duration / 5)
    e2e = sorted(r["e2e_ms"] for r in reqs if r["status"] == 200 and "error" not in r)
    dlq = dlq_verdict(hostile, len(refused), letters)
    judged = verdict(memory, errors, restarts, len(reqs), judge_slopes=duration >= JUDGE_SLOPES_AFTER_S)
    summary = {
        "duration_s": duration,
        "rate_rps": sc.rate_rps,
        "requests": len(reqs),
        "completed": len(e2e),
        "errors": sum(errors.values()),
        "restarts": restarts,
        "e2e_p50_ms": round(e2e[len(e2e) // 2], 1) if e2e else None,
        "e2e_p99_ms": round(e2e[min(len(e2e) - 1, int(0.99 * len(e2e)))], 1) if e2e else None,
        **judged,
        "no_valid_request_failed": not errors,
        "hostile": dlq,
        "broker_rss": broker_growth(memory, len(reqs), hostile),
        "memory_passed": judged["passed"],
        "passed": judged["passed"] and dlq["passed"],
    }
    return {
        "scenario": "soak",
        "load": sc.model_dump(),
        "hostile_share": HOSTILE_SHARE,
        "hostile_refused_by_broker": refused,
        "errors": errors,
        "memory": memory,
        "rss_samples": rows,
        "summary": summary,
    }
