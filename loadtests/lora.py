"""lora-scaling: tokens/s with 0 (base), 1, 4 and 16 distinct LoRA adapters, uniform and Zipf
popularity, with adapter-affinity routing on and off, plus the cold load of one adapter.

Four pipelines (`python -m shared.devstack.cli up`). One vLLM worker, LoRA on, then off: adapters against
base (the target is read here; base requests run through a zero-weight adapter whenever LoRA is
on, so the LoRA-off run gives what LoRA costs). Then two workers, affinity routing on and off: the
launcher starts one, this scenario starts a second (`services.vllm_worker.main`, own instance id,
health port and adapter cache) in the same consumer group, and waits until the heartbeats show the
partitions split between them. On a two-core host the second engine competes with the first, the
broker and services, so those two runs compare routing modes with each other only.

Adapters are real peft adapters of sy-tiny (rank 8, q_proj/v_proj, seeds 1..16) uploaded to the
registry. Every adapter set is warmed before it is measured (on both workers when affinity is
off, since requests are spread there), so tokens/s exclude cold loads; the adapter_load rows seen
while measuring are still counted. The cold load is timed separately: a fresh upload, one
request with max_tokens=1, its `adapter_load` breakdown row and the latency against warm ones.

Before the pipelines, the engine floor (`loadtests.lora_engine`): the same workloads against
AsyncLLM in-process, so each pipeline ratio can be read against what vLLM's own LoRA path costs.

Target (issue): 16 adapters >= 0.8x base tokens/s with affinity routing on.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from .harness.client import at_most, gateway_client, level_summary, prompts
from .harness.client import one as stream_one
from .harness.engine import run_result
from .harness.stack import sy_tiny
from .lora_stack import API_KEY, Stack

MAX_TOKENS = 32
CONCURRENCY = 8
N_ADAPTERS = 16
ZIPF_S = 1.1
TARGET = 0.8


def adapter_names(n: int) -> list[str]:
    return [f"bench-{i:02d}" for i in range(1, n + 1)]


def build_adapters(model_dir: Path, root: Path) -> dict[str, Path]:
    """16 adapters (seeds 1..16) plus one for the cold load (seed 99); rebuilt only when missing."""
    from shared.devstack.models.adapters import build_adapter

    out: dict[str, Path] = {}
    for seed, name in [*enumerate(adapter_names(N_ADAPTERS), start=1), (99, "cold")]:
        d = root / name
        if not (d / "adapter_model.safetensors").is_file() or not (d / "adapter_config.json").is_file():
            build_adapter(model_dir, d, seed, rank=8, target_modules=("q_proj", "v_proj"))
        out[name] = d
    return out


# ------------------------------------------------------------------------------- requests


async def one(
    client: httpx.AsyncClient, model: str, messages: list[dict[str, str]], max_tokens: int = MAX_TOKENS
) -> dict[str, Any]:
    """One streaming request to `model`, with the worker that served it and its adapter loads."""
    r = await stream_one(client, messages, model=model, max_tokens=max_tokens)
    info = r.pop("switchyard") or {}
    loads = [row for row in info.get("breakdown", []) if row.get("stage") == "adapter_load"]
    return {**r, "model": model, "worker": info.get("worker", ""), "adapter_loads": loads}


async def warm(client: httpx.AsyncClient, models: list[str], every_worker: int) -> int:
    """Serve each model until `every_worker` distinct workers ran it (spread routing) or once."""
    msg = prompts(1)[0]
    sent = 0
    for model in models:
        seen: set[str] = set()
        for _ in range(1 if every_worker <= 1 else 6 * every_worker):
            r = await one(client, model, msg, max_tokens=2)
            sent += 1
            seen.add(r["worker"])
            if len(seen) >= every_worker:
                break
    return sent


def pick_models(kind: str, n: int) -> list[str]:
    names = adapter_names(N_ADAPTERS)
    if kind == "base":
        return ["sy-tiny"] * n
    if kind == "zipf":
        rng = random.Random(7)
        weights = [1 / (k**ZIPF_S) for k in range(1, N_ADAPTERS + 1)]
        return rng.choices(names, weights=weights, k=n)
    k = int(kind)
    return [names[i % k] for i in range(n)]  # uniform: round-robin over k adapters


async def workload(stack: Stack, name: str, kind: str, n: int, warm_workers: int) -> dict[str, Any]:
    client = gateway_client(stack.gateway, API_KEY, CONCURRENCY)
    models = pick_models(kind, n)
    random.Random(3).shuffle(models)
    distinct = sorted(set(models))
    warm_requests = await warm(client, distinct, warm_workers)
    await asyncio.sleep(2.5)  # a heartbeat later the router knows what is resident where
    calls = (one(client, m, p) for m, p in zip(models, prompts(n), strict=True))
    t0 = time.perf_counter()
    results = await at_most(CONCURRENCY, calls)
    wall = time.perf_counter() - t0
    await client.aclose()
    ttfts = [r["ttft_s"] * 1000 for r in results if r["ttft_s"] is not None]
    per_worker: dict[str, int] = {}
    for r in results:
        per_worker[r["worker"]] = per_worker.get(r["worker"], 0) + 1
    loads = [row for r in results for row in r["adapter_loads"]]
    return {
        "workload": name,
        "distinct_models": len(distinct),
        "warm_requests": warm_requests,
        **level_summary(CONCURRENCY, n, wall, sum(r["tokens"] for r in results), ttfts),
        "e2e_p50_ms": round(statistics.median(r["seconds"] for r in results) * 1000, 2),
        "requests_per_worker": dict(sorted(per_worker.items())),
        "adapter_loads_while_measuring": len(loads),
        "adapter_loads_downloaded_while_measuring": sum(
            1 for x in loads if str(x.get("downloaded")) == "True"
        ),
        "resident_adapters_after": stack.resident(),
    }


async def cold_load(stack: Stack, name: str, adapter_dir: Path) -> dict[str, Any]:
    await stack.upload(name, adapter_dir)
    msg = prompts(1)[0]
    async with gateway_client(stack.gateway, API_KEY) as client:
        cold = await one(client, name, msg, max_tokens=1)
        warm_runs = [await one(client, name, msg, max_tokens=1) for _ in range(5)]
    # A warm request may land on the other worker (spread routing) and load there: keep those out.
    hot = [r for r in warm_runs if not r["adapter_loads"]] or warm_runs
    warm_ms = statistics.median(r["seconds"] for r in hot) * 1000
    row = cold["adapter_loads"][0] if cold["adapter_loads"] else {}
    cold_ms = cold["seconds"] * 1000
    return {
        "adapter": name,
        "adapter_load_ms": float(row["duration_ms"]) if row else None,
        "downloaded": str(row.get("downloaded")) == "True" if row else None,
        "bytes": int(row["bytes"]) if row.get("bytes") else None,
        "cold_request_ms": round(cold_ms, 2),
        "warm_request_p50_ms": round(warm_ms, 2),
        "cold_minus_warm_ms": round(cold_ms - warm_ms, 2),
        "cold_worker": cold["worker"],
    }


# ------------------------------------------------------------------------------- scenario


def run_engine_floor(model_dir: Path, adapters_dir: Path, lora: bool, n: int) -> dict[str, Any]:
    """`loadtests.lora_engine` in a subprocess (its engine is gone before the next one starts)."""
    args = (str(model_dir), str(adapters_dir), "on" if lora else "off", str(n))
    return run_result("loadtests.lora_engine", *args)  # type: ignore[no-any-return]


async def run_stack(
    label: str, var_dir: Path, model_dir: Path, adapters: dict[str, Path], n: int, workers: int, **env: str
) -> dict[str, Any]:
    lora = env.get("SY_VLLM_ENABLE_LORA", "true") == "true"
    affinity = env.get("SY_ROUTER_ADAPTER_AFFINITY", "true") == "true"
    stack = Stack(var_dir, model_dir, workers, **env)
    t0 = time.perf_counter()
    try:
        await stack.start()
        started_s = time.perf_counter() - t0
        live = len(stack.resident())
        spread = 1 if affinity else live  # with spread routing, warm every adapter on every worker
        out: dict[str, Any] = {
            "run": label,
            "lora": lora,
            "adapter_affinity": affinity,
            "workers": live,
            "partitions_split_between_workers": stack.split_ok,
            "partitions": {w: v["partitions"] for w, v in sorted(stack.heartbeats.live().items())},  # type: ignore[union-attr]
            "startup_s": round(started_s, 1),
        }
        plan = [("base", "base")]
        if lora:
            for name in adapter_names(N_ADAPTERS):
                await stack.upload(name, adapters[name])
            plan += [("1-adapter", "1"), ("4-uniform", "4"), ("16-uniform", "16"), ("16-zipf", "zipf")]
        results = [await workload(stack, wl, kind, n, spread) for wl, kind in plan]
        base = results[0]["tokens_per_s"]
        for r in results:
            r["ratio_to_run_base"] = round(r["tokens_per_s"] / base, 3)
        out["workloads"] = {r.pop("workload"): r for r in results}
        if lora:
            out["cold_load"] = await cold_load(stack, f"cold-{label}", adapters["cold"])
        return out
    finally:
        await stack.stop()


def engine_floor(floor_off: dict[str, Any], floor_on: dict[str, Any]) -> dict[str, dict[str, float]]:
    """tokens/s of each engine-floor workload, LoRA off and on."""
    on = {wl: r["tokens_per_s"] for wl, r in floor_on.items() if isinstance(r, dict)}
    return {"lora-off": {"base": floor_off["base"]["tokens_per_s"]}, "lora-on": on}


def summarize(
    runs: dict[str, dict[str, Any]], floor_off: dict[str, Any], floor_on: dict[str, Any]
) -> dict[str, Any]:
    """The figures of the four stacks and the engine floor; the target is read on one worker."""
    lora_off_base = runs["one-worker-lora-off"]["workloads"]["base"]["tokens_per_s"]
    for w in runs["one-worker"]["workloads"].values():
        w["ratio_to_lora_off_base"] = round(w["tokens_per_s"] / lora_off_base, 3)

    live_workers = min(r["workers"] for label, r in runs.items() if label.startswith("affinity"))
    summary: dict[str, Any] = {
        "workers": live_workers,
        "affinity_comparison_meaningful": live_workers >= 2,
        "tokens_per_s": {
            label: {wl: w["tokens_per_s"] for wl, w in r["workloads"].items()} for label, r in runs.items()
        },
        "lora_cost_on_base": runs["one-worker"]["workloads"]["base"]["ratio_to_lora_off_base"],
    }
    summary["16_adapter_ratios"] = {
        f"{wl}/{label}": runs[label]["workloads"][wl]["ratio_to_run_base"]
        for label in ("one-worker", "affinity-on", "affinity-off")
        for wl in ("16-uniform", "16-zipf")
    }
    summary["engine_floor_tokens_per_s"] = engine = engine_floor(floor_off, floor_on)
    summary["engine_floor_16_adapter_ratios"] = {
        wl: {
            "vs_base_through_zero_adapter": round(
                engine["lora-on"][wl] / engine["lora-on"]["zero-adapter"], 3
            ),
            "vs_base_lora_on": round(engine["lora-on"][wl] / engine["lora-on"]["base"], 3),
            "vs_base_lora_off": round(engine["lora-on"][wl] / engine["lora-off"]["base"], 3),
        }
        for wl in ("16-uniform", "16-zipf")
    }
    one = runs["one-worker"]["workloads"]
    summary["target"] = {
        "rule": f"16 adapters >= {TARGET}x base tokens/s with affinity routing on",
        "base": "the same deployment's base workload (LoRA on: base requests through the zero adapter), one worker",
        "uniform": one["16-uniform"]["ratio_to_run_base"],
        "zipf": one["16-zipf"]["ratio_to_run_base"],
        "met": min(one["16-uniform"]["ratio_to_run_base"], one["16-zipf"]["ratio_to_run_base"]) >= TARGET,
        "vs_lora_off_base": {wl: one[wl]["ratio_to_lora_off_base"] for wl in ("16-uniform", "16-zipf")},
        "met_vs_lora_off_base": min(
            one["16-uniform"]["ratio_to_lora_off_base"], one["16-zipf"]["ratio_to_lora_off_base"]
        )
        >= TARGET,
    }
    summary["cold_load"] = {
        label: {
            k: runs[label]["cold_load"][k]
            for k in ("adapter_load_ms", "downloaded", "cold_request_ms", "warm_request_p50_ms")
        }
        for label in ("one-worker", "affinity-on", "affinity-off")
    }
    single = [
        f"{label}/{wl}"
        for label, r in runs.items()
        for wl, w in r["workloads"].items()
        if r["workers"] >= 2 and len(w["requests_per_worker"]) < 2
    ]
    if single:
        # With affinity on, base requests share one key (the model name), hence one partition.
        summary["served_by_one_worker"] = single
    if live_workers < 2:
        summary["note"] = (
            "one vLLM worker: affinity on/off routes to the same engine, the comparison is not meaningful"
        )
    return summary


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    model_dir = sy_tiny()
    bench = (out / "lora-scaling").resolve()
    adapters = await asyncio.to_thread(build_adapters, model_dir, bench / "adapters")
    n = 16 if quick else 48
    # What LoRA costs in vLLM itself: the same workloads against AsyncLLM in-process, LoRA off and on.
    floor_off = await asyncio.to_thread(run_engine_floor, model_dir, bench / "adapters", False, n)
    floor_on = await asyncio.to_thread(run_engine_floor, model_dir, bench / "adapters", True, n)
    runs: dict[str, dict[str, Any]] = {}
    for label, count, env in (
        # One worker (the default deployment here): adapters vs base with nothing else moving.
        # The target is read here.
        ("one-worker", 1, {"SY_ROUTER_ADAPTER_AFFINITY": "true"}),
        ("one-worker-lora-off", 1, {"SY_VLLM_ENABLE_LORA": "false", "SY_ROUTER_ADAPTER_AFFINITY": "false"}),
        # Two workers for routing: on two cores the second engine shares the cores, so these
        # runs compare affinity on and off with each other, not with the engine.
        ("affinity-on", 2, {"SY_ROUTER_ADAPTER_AFFINITY": "true"}),
        ("affinity-off", 2, {"SY_ROUTER_ADAPTER_AFFINITY": "false"}),
    ):
        runs[label] = await run_stack(label, bench / f"var-{label}", model_dir, adapters, n, count, **env)

    summary = summarize(runs, floor_off, floor_on)
    return {
        "scenario": "lora-scaling",
        "workload": {
            "max_tokens": MAX_TOKENS,
            "min_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": True,
            "concurrency": CONCURRENCY,
            "requests_per_workload": n,
            "zipf_s": ZIPF_S,
            "adapters": {
                "count": N_ADAPTERS,
                "rank": 8,
                "target_modules": ["q_proj", "v_proj"],
                "seeds": "1..16",
            },
            "vllm_workers": 2,
            "second_worker": "started by the scenario (python -m services.vllm_worker.main, SY_INSTANCE_ID=vllm_worker-2)",
            "engine": {
                "max_loras": floor_on["max_loras"],
                "max_cpu_loras": floor_on["max_cpu_loras"],
            },
            "quick": quick,
        },
        "runs": runs,
        "engine_floor": {"lora-off": floor_off, "lora-on": floor_on},
        "wall_s": round(time.perf_counter() - t0, 1),
        "summary": summary,
    }
