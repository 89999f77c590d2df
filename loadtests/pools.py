"""pools: the vLLM pool and the Triton pool side by side, through the whole pipeline.

One `switchyard up` with two pools serving sy-tiny: `vllm` (device cpu, cost 1) and `triton`
(device edge, cost 0.5). Requests go in on the ingest topic (the public Kafka API), so the
priority field can be set; answers are read from sy.responses.

- per pool, the same workload (same prompts and sampling; only the priority differs, which is
  what sends it to one pool or the other): tokens/s, TTFT p50/p99 (produce -> first token, from
  the response's timings), and tokens per joule where RAPL (CPU) or NVML (GPU) can be read;
- a mixed workload (interactive and batch at once): which pool each class landed on, and TTFT
  per class;
- routing-decision overhead: the `route` timing of every response (p50/p99), and choose_pool
  alone over a larger pool table (p99, in-process).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from switchyard.v1.envelope_pb2 import ChatMessage, Priority, Request, SamplingParams

from shared.devstack.models import tasks
from shared.runtime.bus import decode_record
from shared.runtime.envelope import Envelope, Kind, Rejected, encode

from .harness.client import at_most
from .harness.report import pct
from .harness.stack import pipeline, sy_tiny, var_dir

MAX_TOKENS = 32
POOLS = [
    {"name": "vllm", "engine": "vllm", "device": "cpu", "models": ["sy-tiny"], "cost": 1.0},
    {
        "name": "triton",
        "engine": "triton",
        "device": "edge",
        "models": ["sy-tiny", "sy-tiny-bf16"],
        "cost": 0.5,
    },
]


# ------------------------------------------------------------------ power
class Power:
    """Energy counters: RAPL package energy (CPU) and NVML (GPU), where readable."""

    def __init__(self) -> None:
        self.rapl = sorted(Path("/sys/class/powercap").glob("intel-rapl:*/energy_uj"))
        self.rapl = [p for p in self.rapl if os.access(p, os.R_OK)]
        self.nvml: Any = None
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            self.nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML here
            self.nvml = None

    @property
    def available(self) -> bool:
        return bool(self.rapl or self.nvml)

    def why_not(self) -> str:
        return (
            "no power readings: RAPL energy counters (/sys/class/powercap/intel-rapl:*) are absent or "
            "unreadable and NVML (pynvml, NVIDIA driver) is not available on this machine; tokens per joule "
            "not measured"
        )

    def joules(self) -> float:
        total = 0.0
        for p in self.rapl:
            total += int(p.read_text()) / 1e6
        if self.nvml is not None:
            for i in range(self.nvml.nvmlDeviceGetCount()):
                h = self.nvml.nvmlDeviceGetHandleByIndex(i)
                total += self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3
        return total


# ------------------------------------------------------------------ driver
class Driver:
    """Produce envelopes to sy.requests, match answers from sy.responses by request id."""

    def __init__(self, bootstrap: str, prefix: str = "sy.") -> None:
        self.bootstrap, self.prefix = bootstrap, prefix
        self.waiting: dict[str, asyncio.Future[tuple[Envelope, float]]] = {}
        self.sent_at: dict[str, float] = {}

    async def __aenter__(self) -> Driver:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=1)
        await self.producer.start()
        self.consumer = AIOKafkaConsumer(
            f"{self.prefix}responses",
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=10,
            max_partition_fetch_bytes=16 << 20,
        )
        await self.consumer.start()
        self.reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        await self.consumer.stop()
        await self.producer.stop()

    async def _read(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=100)
            now = time.time()
            for recs in batch.values():
                for r in recs:
                    try:
                        env = decode_record(r)  # JSON replies (a Kafka client's) beside protobuf
                    except Rejected:
                        continue
                    fut = self.waiting.pop(env.request_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result((env, now))

    async def ask(self, env: Envelope) -> dict[str, Any]:
        fut: asyncio.Future[tuple[Envelope, float]] = asyncio.get_running_loop().create_future()
        self.waiting[env.request_id] = fut
        t0 = time.time()
        await self.producer.send_and_wait(
            f"{self.prefix}requests",
            encode(env),
            key=env.request_id.encode(),
            headers=[("content-type", b"application/x-protobuf")],
        )
        got, t1 = await asyncio.wait_for(fut, timeout=300)
        return summarize(got, t0, t1)


def summarize(env: Envelope, t0: float, t1: float) -> dict[str, Any]:
    rows = {t.stage: t for t in env.timings}
    first = min((t.start_ns for t in env.timings), default=int(t0 * 1e9))
    ttft = rows.get("ttft")
    route = rows.get("route")
    return {
        "pool": env.response.pool or None,
        "error": env.error.message if env.HasField("error") else None,
        "tokens": env.response.usage.completion_tokens,
        "ttft_ms": (ttft.end_ns - first) / 1e6 if ttft is not None else None,
        "e2e_ms": (t1 - t0) * 1000,
        "route_us": (route.end_ns - route.start_ns) / 1e3 if route is not None else None,
        "route_reason": route.attrs.get("reason") if route is not None else None,
    }


def request(i: int, priority: int, tag: str, rng: random.Random) -> Envelope:
    task = tasks.TASKS[i % len(tasks.TASKS)]
    return Envelope(
        request_id=f"{tag}-{i}-{time.time_ns()}",
        tenant="bench",
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        priority=priority,
        request=Request(
            messages=[ChatMessage(role="user", content=tasks.sample(task, rng).prompt)],
            sampling=SamplingParams(max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS, temperature=0.0),
        ),
    )


async def closed_loop(
    drv: Driver, envs: list[Envelope], concurrency: int
) -> tuple[list[dict[str, Any]], float]:
    async def one(e: Envelope) -> dict[str, Any]:
        return {**await drv.ask(e), "priority": Priority.Name(e.priority)}

    t0 = time.perf_counter()
    results = await at_most(concurrency, (one(e) for e in envs))
    return results, time.perf_counter() - t0


def stats(results: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    ok = [r for r in results if not r["error"]]
    ttft = [r["ttft_ms"] for r in ok if r["ttft_ms"] is not None]
    tokens = sum(r["tokens"] for r in ok)
    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "pools": {p: sum(1 for r in ok if r["pool"] == p) for p in sorted({r["pool"] for r in ok})},
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1) if wall else None,
        "ttft_p50_ms": round(pct(ttft, 0.5), 2),
        "ttft_p99_ms": round(pct(ttft, 0.99), 2),
    }


# ------------------------------------------------------------------ stack
def choose_pool_overhead(n: int = 20000) -> dict[str, Any]:
    """choose_pool alone: 8 pools (4 serving the model) x 8 workers each, live heartbeats."""
    from switchyard.v1.events_pb2 import Heartbeat

    from services.router.policy import PoolState, choose_pool
    from services.router.workers import WorkerTable
    from shared.runtime.config import PoolConfig

    devices = ["gpu", "cpu", "edge", "cpu"]
    pools = [
        PoolConfig(
            name=f"p{i}",
            engine="vllm",
            device=devices[i % 4],
            models=["sy-tiny" if i < 4 else f"m{i}"],
            cost=1 + i,
        )
        for i in range(8)
    ]
    table = WorkerTable(stale_after_s=1e9)
    for p in pools:
        for w in range(8):
            table.update(
                Heartbeat(
                    pool=p.name, worker_id=f"{p.name}-{w}", in_flight=w, max_in_flight=16, partitions=[w]
                )
            )
    state = PoolState(table)
    rng = random.Random(3)
    envs = [request(i, rng.choice([0, 2]), "ovh", rng) for i in range(64)]
    times = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        choose_pool(envs[i % 64], pools, state)
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return {
        "pools": len(pools),
        "workers": 8 * len(pools),
        "decisions": n,
        "p50_us": round(pct(times, 0.5), 2),
        "p99_us": round(pct(times, 0.99), 2),
    }


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    n, conc = (12, 4) if quick else (32, 8)
    power = Power()
    rng = random.Random(5)
    per_pool: dict[str, Any] = {}
    stack = pipeline(  # the cache off: the workload repeats prompts, this scenario measures serving
        sy_tiny(),
        var_dir(out, "pools-var"),
        single_pool=False,
        log_name="pools.log",
        ready_timeout_s=420,
        stop_timeout_s=90,
        SY_POOLS=json.dumps(POOLS),
    )
    with stack as running:
        async with Driver(running.endpoints["kafka"]) as drv:
            # warm both pools (first calls compile/allocate), not measured
            await closed_loop(drv, [request(i, p, "warm", rng) for i in range(4) for p in (1, 2)], 4)
            for label, priority in (
                ("vllm", Priority.PRIORITY_INTERACTIVE),
                ("triton", Priority.PRIORITY_BATCH),
            ):
                rng_same = random.Random(7)  # the same prompts for both pools
                envs = [request(i, priority, label, rng_same) for i in range(n)]
                j0 = power.joules() if power.available else 0.0
                results, wall = await closed_loop(drv, envs, conc)
                row = stats(results, wall)
                if power.available:
                    joules = power.joules() - j0
                    row["joules"] = round(joules, 2)
                    row["tokens_per_joule"] = round(row["tokens"] / joules, 3) if joules > 0 else None
                per_pool[label] = row
            mixed_envs = [
                request(i, Priority.PRIORITY_INTERACTIVE if i % 2 else Priority.PRIORITY_BATCH, "mix", rng)
                for i in range(2 * n)
            ]
            mixed, wall = await closed_loop(drv, mixed_envs, 2 * conc)
    by_class = {
        cls: stats([r for r in mixed if r["priority"] == cls], wall)
        for cls in ("PRIORITY_INTERACTIVE", "PRIORITY_BATCH")
    }
    routes = [r["route_us"] for r in mixed if r["route_us"] is not None]
    route_overhead = {
        "decisions": len(routes),
        "route_timing_p50_us": round(pct(routes, 0.5), 1),
        "route_timing_p99_us": round(pct(routes, 0.99), 1),
    }
    reasons = sorted({r["route_reason"] for r in mixed if r["route_reason"]})[:6]
    summary: dict[str, Any] = {
        "per_pool": {
            k: {
                kk: v[kk]
                for kk in ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "pools", "errors")
                if kk in v
            }
            | ({"tokens_per_joule": v["tokens_per_joule"]} if "tokens_per_joule" in v else {})
            for k, v in per_pool.items()
        },
        "mixed_split": {k: v["pools"] for k, v in by_class.items()},
        "mixed_ttft_p50_ms": {k: v["ttft_p50_ms"] for k, v in by_class.items()},
        "routing_overhead": route_overhead,
        "choose_pool_in_process": choose_pool_overhead(5000 if quick else 20000),
    }
    if "vllm" in per_pool and "triton" in per_pool and per_pool["vllm"]["tokens_per_s"]:
        summary["triton_vs_vllm_tokens_per_s"] = round(
            per_pool["triton"]["tokens_per_s"] / per_pool["vllm"]["tokens_per_s"], 3
        )
    if not power.available:
        summary["power"] = power.why_not()
    return {
        "scenario": "pools",
        "workload": {
            "requests_per_pool": n,
            "concurrency": conc,
            "max_tokens": MAX_TOKENS,
            "min_tokens": MAX_TOKENS,
            "temperature": 0,
        },
        "pools": POOLS,
        "per_pool": per_pool,
        "mixed": {"by_class": by_class, "route_reasons": reasons},
        "summary": summary,
    }
