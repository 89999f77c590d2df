"""Engine traces for `switchyard profile --engine-trace`: capture a window through the vLLM
worker's profiler endpoints, then summarise the torch profiler's Chrome-trace JSON.

On a GPU the trace holds CUDA kernels (category `kernel`) and runtime calls, among them the
CPU-GPU synchronisations (cudaDeviceSynchronize, cudaStreamSynchronize, blocking memcpy) that
stall the engine loop; on CPU it holds aten operators (`cpu_op`). The summary ranks both the
same way: self time (less nested children) per (category, name). Open the file in https://ui.perfetto.dev for the
timeline.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
from collections import defaultdict
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def load_events(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e]


def self_times(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """Each event with its self time (its duration less its children's), nesting per thread."""
    out: list[tuple[dict[str, Any], float]] = []
    threads: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        threads[(e.get("pid"), e.get("tid"))].append(e)
    for evs in threads.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[list[Any]] = []  # [event, end, children's time]
        for e in evs:
            ts, dur = float(e["ts"]), float(e["dur"])
            while stack and ts >= stack[-1][1]:
                done = stack.pop()
                out.append((done[0], float(done[0]["dur"]) - done[2]))
            if stack:
                stack[-1][2] += dur
            stack.append([e, ts + dur, 0.0])
        out += [(d[0], float(d[0]["dur"]) - d[2]) for d in stack]
    return out


def summarise(paths: list[Path], top: int = 15) -> dict[str, Any]:
    """Top operations/kernels by self time, time per category, CPU-GPU sync calls."""
    self_t: dict[tuple[str, str], float] = defaultdict(float)
    total: dict[tuple[str, str], float] = defaultdict(float)
    count: dict[tuple[str, str], int] = defaultdict(int)
    by_cat: dict[str, float] = defaultdict(float)
    sync = {"calls": 0, "ms": 0.0}
    for path in paths:
        events = [e for e in load_events(path) if e.get("cat") not in ("Trace", "python_function")]
        for e, own in self_times(events):
            cat, name, dur = str(e.get("cat", "")), str(e.get("name", "")), float(e["dur"])
            key = (cat, name)
            total[key] += dur
            count[key] += 1
            by_cat[cat] += dur
            if cat != "user_annotation":
                self_t[key] += own
            if name.startswith(SYNC_CALLS):
                sync["calls"] += 1
                sync["ms"] += dur / 1000
    ranked = sorted(self_t.items(), key=lambda kv: -kv[1])
    return {
        "files": [p.name for p in paths],
        "events": sum(count.values()),
        "by_category_ms": {k: round(v / 1000, 3) for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])},
        "top": [
            {
                "category": c,
                "name": n[:120],
                "self_ms": round(v / 1000, 3),
                "total_ms": round(total[(c, n)] / 1000, 3),
                "calls": count[(c, n)],
            }
            for (c, n), v in ranked[:top]
        ],
        "cpu_gpu_sync": {"calls": sync["calls"], "ms": round(sync["ms"], 3)},
        "gpu": "kernel" in by_cat,
    }


async def capture(
    load: Awaitable[T], worker_url: str, token: str, delay_s: float, window_s: float, prefix: str
) -> tuple[T, dict[str, Any]]:
    """Run `load`; `delay_s` into it, trace the engine for `window_s`. Returns (load's result,
    the worker's answer: prefix, seconds, files)."""
    task = asyncio.ensure_future(load)
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=worker_url, headers=auth, timeout=120) as http:
        await asyncio.sleep(delay_s)
        r = await http.post("/v1/profile/start", json={"prefix": prefix})
        if r.status_code != 200:
            task.cancel()
            raise RuntimeError(f"engine profile start: {r.status_code} {r.text}")
        await asyncio.sleep(window_s)
        stopped = await http.post("/v1/profile/stop")
        if stopped.status_code != 200:
            task.cancel()
            raise RuntimeError(f"engine profile stop: {stopped.status_code} {stopped.text}")
    return await task, stopped.json()


def collect(answer: dict[str, Any], out: Path, base: Path | None = None) -> dict[str, Any]:
    """Copy the trace files next to the report (it links them) and summarise them. The worker
    names them relative to its own directory (`base`), which need not be ours."""
    dest = out / "engine-trace"
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    missing = []
    for f in answer.get("files", []):
        src = Path(f) if base is None else base / f
        if not src.is_file():
            missing.append(str(src))
        else:
            shutil.copy2(src, dest / src.name)
            copied.append(dest / src.name)
    traces = [p for p in copied if p.name.endswith((".json", ".json.gz"))]  # beside: vLLM's text table
    try:
        summary = summarise(traces) if traces else {"files": [], "events": 0, "top": []}
    except (OSError, ValueError) as exc:  # an unreadable trace must not cost the run's report
        summary = {"files": [p.name for p in traces], "events": 0, "top": [], "error": repr(exc)[:300]}
    summary["window_s"] = answer.get("seconds")
    summary["missing"] = missing
    summary["links"] = [f"engine-trace/{p.name}" for p in copied]
    return summary
