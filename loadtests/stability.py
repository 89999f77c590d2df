"""stability: does a request cost the same after 100k requests as in the first 10k (issue #36)?

The stack as `make run` starts it with one vLLM pool and the cache off, fed ordinary chat
requests (unique prompts, `max_tokens=1`, unstreamed, so the engine is nearly free and the run
measures the pipeline) at concurrency 16 until REQUESTS have been answered (`--quick`: 10k).
The run is cut in ten windows; each reports its CPU per request per process (from /proc, vLLM's
engine processes apart), each hop's p50 from the per-request breakdown, the end-to-end p50/p99
and the broker's RSS at its end. Target: the last window costs ≤ 1.2x the first in CPU per
request and in the sum of the hop p50s.

The embedded broker keeps every byte in memory with no retention, and its fetch time grows with
the batches a partition holds: if it cannot hold the run, the run stops once a window's p50 is
STOP_FACTOR x the first window's or its answered rate under half the first window's, and reports
how far it went and where the launcher warned (SY_BROKER_RSS_WARN_MB).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests.cost import ENGINE, cpu_snapshot, per_request_ms
from loadtests.harness.client import fresh_prompts
from loadtests.harness.procs import stack_processes
from loadtests.harness.report import pct
from loadtests.harness.stack import pipeline, sy_tiny, var_dir
from loadtests.pipeline import API_KEY
from shared.runtime.procs import rss_bytes

REQUESTS = 100_000
QUICK_REQUESTS = 10_000
WINDOWS = 10
CONCURRENCY = 16
TARGET_RATIO = 1.2
STOP_FACTOR = 10.0
STOP_RATE_SHARE = 0.5  # a window answering under half the first window's rate: the broker cannot hold it
WARNING = "kafka: the embedded broker holds"


async def _one(client: httpx.AsyncClient, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"model": "sy-tiny", "messages": messages, "max_tokens": 1, "temperature": 0}
    t0 = time.perf_counter()
    try:
        r = await client.post("/chat/completions", json=body)
    except httpx.HTTPError:
        return {"ok": False, "ms": (time.perf_counter() - t0) * 1000, "hops": {}}
    ms = (time.perf_counter() - t0) * 1000
    if r.status_code != 200:
        return {"ok": False, "ms": ms, "hops": {}}
    hops = {}
    for row in (r.json().get("switchyard") or {}).get("breakdown", []):
        if "parent" not in row:
            name = row["stage"] if row["stage"] != "queue" else f"hop:{row['topic']}"
            hops[name] = float(row["duration_ms"])
    return {"ok": True, "ms": ms, "hops": hops}


async def window(
    client: httpx.AsyncClient, named: dict[str, int], broker_pid: int | None, n: int
) -> dict[str, Any]:
    """n requests at CONCURRENCY: CPU per request per process, hops, latency, broker RSS."""
    queue: asyncio.Queue[list[dict[str, str]]] = asyncio.Queue()
    for m in fresh_prompts(n):
        queue.put_nowait(m)
    results: list[dict[str, Any]] = []

    async def worker() -> None:
        while not queue.empty():
            results.append(await _one(client, queue.get_nowait()))

    before = cpu_snapshot(named)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    wall = time.perf_counter() - t0
    cpu = per_request_ms(before, cpu_snapshot(named), n)
    hop_names = list(dict.fromkeys(h for r in results for h in r["hops"]))
    hops = {h: round(pct([r["hops"][h] for r in results if h in r["hops"]], 0.5), 2) for h in hop_names}
    lat = [r["ms"] for r in results if r["ok"]]
    return {
        "requests": n,
        "errors": sum(1 for r in results if not r["ok"]),
        "requests_per_s": round(n / wall, 1),
        "p50_ms": round(pct(lat, 0.5), 1),
        "p99_ms": round(pct(lat, 0.99), 1),
        "off_engine_cpu_ms_per_request": round(sum(v for k, v in cpu.items() if k != ENGINE), 2),
        "hops_p50_sum_ms": round(sum(v for k, v in hops.items() if k.startswith("hop:")), 2),
        "hops_p50_ms": hops,
        "cpu_ms_per_request": cpu,
        "broker_rss_mib": round((rss_bytes(broker_pid) or 0) / 2**20, 1) if broker_pid else None,
    }


def warned_at(log: Path, marks: list[tuple[int, int]]) -> int | None:
    """Requests answered when the launcher first warned of the broker's memory (its log lines
    counted against the windows' end positions in the log), or None."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    at = text.find(WARNING)
    if at < 0:
        return None
    return next((done for done, end in marks if at < end), marks[-1][0] if marks else None)


async def run(out: Path, quick: bool = False, requests: int | None = None) -> dict[str, Any]:
    total = requests or (QUICK_REQUESTS if quick else REQUESTS)
    per = total // WINDOWS
    model_dir = sy_tiny()
    var = var_dir(out, "stability-var")
    rows: list[dict[str, Any]] = []
    stopped = "done"
    with pipeline(model_dir, var, cache=False, stop_timeout_s=120, log_name="stability.log") as stack:
        named = stack_processes(stack.endpoints)
        broker = named.get("broker")
        log = var / "stability.log"
        marks: list[tuple[int, int]] = []
        async with httpx.AsyncClient(
            base_url=stack.url,
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=120,
            limits=httpx.Limits(max_connections=CONCURRENCY + 4),
        ) as client:
            for m in fresh_prompts(CONCURRENCY):  # warm-up
                await _one(client, m)
            for i in range(WINDOWS):
                row = await window(client, named, broker, per)
                row["answered_total"] = per * (i + 1)
                rows.append(row)
                marks.append((row["answered_total"], log.stat().st_size if log.exists() else 0))
                print(
                    f"stability: {row['answered_total']:,} answered, {row['requests_per_s']} req/s, "
                    f"p50 {row['p50_ms']} ms, broker {row['broker_rss_mib']} MiB",
                    flush=True,
                )
                if row["errors"] > 0.01 * per:
                    stopped = "errors"
                    break
                if row["p50_ms"] > STOP_FACTOR * rows[0]["p50_ms"]:
                    stopped = f"p50 over {STOP_FACTOR:g}x the first window's"
                    break
                if row["requests_per_s"] < STOP_RATE_SHARE * rows[0]["requests_per_s"]:
                    stopped = f"answered rate under {STOP_RATE_SHARE:.0%} of the first window's"
                    break
        warned = warned_at(log, marks)
    first, last = rows[0], rows[-1]
    cpu_ratio = last["off_engine_cpu_ms_per_request"] / first["off_engine_cpu_ms_per_request"]
    hop_ratio = last["hops_p50_sum_ms"] / first["hops_p50_sum_ms"] if first["hops_p50_sum_ms"] else None
    summary = {
        "requests_planned": total,
        "requests_answered": last["answered_total"],
        "stopped_by": stopped,
        "window_requests": per,
        "first_window_cpu_ms_per_request": first["off_engine_cpu_ms_per_request"],
        "last_window_cpu_ms_per_request": last["off_engine_cpu_ms_per_request"],
        "cpu_last_vs_first": round(cpu_ratio, 3),
        "first_window_hops_p50_sum_ms": first["hops_p50_sum_ms"],
        "last_window_hops_p50_sum_ms": last["hops_p50_sum_ms"],
        "hops_last_vs_first": round(hop_ratio, 3) if hop_ratio is not None else None,
        "first_window_p50_ms": first["p50_ms"],
        "last_window_p50_ms": last["p50_ms"],
        "broker_rss_end_mib": last["broker_rss_mib"],
        "launcher_warned_at_requests": warned,
        "errors": sum(r["errors"] for r in rows),
        "target": TARGET_RATIO,
        "pass": stopped == "done"
        and cpu_ratio <= TARGET_RATIO
        and (hop_ratio is None or hop_ratio <= TARGET_RATIO),
    }
    return {
        "scenario": "stability",
        "workload": {"max_tokens": 1, "stream": False, "concurrency": CONCURRENCY, "cache": False},
        "windows": rows,
        "summary": summary,
    }
