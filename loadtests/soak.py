"""soak: the whole stack as `make run` starts it (broker, Milvus, Triton, every service, cache on)
at a fixed request rate for 30 minutes (`--quick`: 4), to find slow leaks and rare errors.

Every 10 s the resident memory of each service is sampled — its whole process tree, so the vLLM
worker counts with its EngineCore — plus the broker, Milvus and Triton. Growth is the slope of a
least-squares line through a process's samples, in MiB per hour, twice: after the warm-up (the
last four fifths) and in the last third. A leak keeps its slope; warm-up growth (allocator
arenas, tokenizer and prefix caches, first shapes through the engine) fades, so the verdict is on
the last third. Pass: every request answered without error, no process restarted, and no
service's late slope above MAX_SLOPE_MIB_PER_H.

The broker and Milvus are stores: they grow with the data they keep (the embedded broker's memory
storage has no retention; Milvus keeps cache entries until their TTL). Their growth is reported
per request, not judged as a leak; production Kafka and Milvus keep data on disk with retention.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from loadtests.pipeline import ROOT, start_pipeline
from shared.profiling import runner
from shared.profiling.scenarios import Scenario

# A leak of ~9 KiB per request at 2 requests/s; allocator noise on these services is far below.
MAX_SLOPE_MIB_PER_H = 64.0
SAMPLE_EVERY_S = 10.0


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (0 when it is gone)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def processes(endpoints: dict[str, Any]) -> dict[str, int]:
    """name -> pid of every process the launcher runs (services and embedded servers)."""
    named = {n: int(i["pid"]) for n, i in endpoints["services"].items() if i.get("pid")}
    if endpoints.get("kafka_pid"):
        named["broker"] = int(endpoints["kafka_pid"])
    known = set(named.values())
    try:
        children = psutil.Process(int(endpoints["launcher_pid"])).children()
    except psutil.Error:
        children = []
    for child in children:  # the embedded Milvus and Triton are the launcher's other children
        if child.pid in known:
            continue
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "milvus" in cmd:
            named["milvus"] = child.pid
        elif "tritonserver" in cmd:
            named["triton"] = child.pid
    return named


def slope_mib_per_h(points: list[tuple[float, int]]) -> float | None:
    """Least-squares slope of (seconds, bytes) in MiB/hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(b for _, b in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mx) * (b - my) for t, b in points)
    return round(cov / var * 3600 / 2**20, 2)


async def sample_rss(endpoints_path: Path, rows: list[dict[str, Any]], stop: asyncio.Event) -> None:
    t0 = time.monotonic()
    while not stop.is_set():
        try:
            ep = json.loads(endpoints_path.read_text())
            rows.append(
                {
                    "t": round(time.monotonic() - t0, 1),
                    "rss": {n: tree_rss(p) for n, p in processes(ep).items()},
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
    memory: dict[str, dict[str, Any]], errors: dict[str, int], restarts: dict[str, Any], requests: int
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
        "passed": not errors and not restarts and all(v <= MAX_SLOPE_MIB_PER_H for v in late.values()),
    }


async def run(out: Path, quick: bool = False, duration_s: float | None = None) -> dict[str, Any]:
    from shared.config import Settings
    from shared.models.build import build_model

    model_dir = build_model("sy-tiny", ROOT / "var" / "models", progress=False)
    var_dir = (out / "soak-var").resolve()
    var_dir.mkdir(parents=True, exist_ok=True)
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
    lora = str(Settings.model_fields["vllm_enable_lora"].default).lower()
    proc, url = start_pipeline(
        model_dir, var_dir, cache=True, single_pool=False, ready_timeout_s=900, SY_VLLM_ENABLE_LORA=lora
    )
    endpoints_path = var_dir / "run" / "endpoints.json"
    rows: list[dict[str, Any]] = []
    stop = asyncio.Event()
    try:
        ep = json.loads(endpoints_path.read_text())
        sampler = asyncio.create_task(sample_rss(endpoints_path, rows, stop))
        data = await runner.run(sc, url.removesuffix("/v1"), {}, "sk-switchyard-local", progress=False)
        stop.set()
        await sampler
        ep = json.loads(endpoints_path.read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
    reqs = data["requests"]
    errors: dict[str, int] = {}
    for r in reqs:
        if r["status"] != 200 or "error" in r:
            key = f"{r['status']} {str(r.get('error', ''))[:80]}".strip()
            errors[key] = errors.get(key, 0) + 1
    restarts = {n: i.get("exits", {}) for n, i in ep["services"].items() if i.get("exits")}
    memory = memory_summary(rows, warmup_s=duration / 5)
    e2e = sorted(r["e2e_ms"] for r in reqs if r["status"] == 200 and "error" not in r)
    summary = {
        "duration_s": duration,
        "rate_rps": sc.rate_rps,
        "requests": len(reqs),
        "completed": len(e2e),
        "errors": sum(errors.values()),
        "restarts": restarts,
        "e2e_p50_ms": round(e2e[len(e2e) // 2], 1) if e2e else None,
        "e2e_p99_ms": round(e2e[min(len(e2e) - 1, int(0.99 * len(e2e)))], 1) if e2e else None,
        **verdict(memory, errors, restarts, len(reqs)),
    }
    return {
        "scenario": "soak",
        "load": sc.model_dump(),
        "errors": errors,
        "memory": memory,
        "rss_samples": rows,
        "summary": summary,
    }
