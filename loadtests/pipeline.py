"""pipeline-vs-engine: the same streaming workload (a) against vLLM's AsyncLLM called in-process,
(b) against vLLM's own OpenAI server and (c) through Switchyard's gateway (Kafka hops, stages,
worker) — the whole stack as `make run` starts it, then (d) only the services a chat request
crosses, then (e) the whole stack with SY_SERVICE_CPUS=off — one after the other in one run, all
with the worker's engine flags (LoRA off on every side: the lora-scaling scenario measures LoRA).

Reports tokens/s and their ratio, TTFT p50/p99, the TTFT Switchyard adds over the in-process
engine, and each Kafka hop's share (from the per-request breakdown in the final chunk). Two more
baselines tell costs apart: AsyncLLM on the cores `switchyard up` gives the engine (its front end on
the services' core, as in the worker), and the TTFT of single requests sent after the stack has
sat idle (the readers' idle fetch wait). LOADTESTS_STACK_ENV sets a setting in every stack (A/Bs).
Requests to a pinned stack are sent from the services' cores, as the in-process baseline's are.

The headline pair takes turns: the in-process engine (on the cores `switchyard up` gives it and on
every core, the faster counts), a fresh whole stack, the engine again, ROUNDS times; each stack round
is read against the faster engine turn beside it and the median round is the target figure (the
host's speed drifts by a third within minutes, so a ratio across minutes measures the drift). Beside it, stricter: Switchyard's best round
against the engine's fastest run anywhere in the bench (every core or the engine's cores, before or
after the stacks), every run kept in the JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from shared.devstack.models import tasks
from shared.runtime.procs import free_port, stop_process

from .stack import (
    baseline_executors,
    client_on_services_cores,
    gateway_url,
    paired,
    run_result,
    split_ceiling,
    start_stack,
    stop_stack,
    switchyard_placement,
)
from .stack import fastest as stack_fastest

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 64
ROUNDS = 3  # engine and whole stack take turns this many times (README: the headline pair)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def prompts(n: int) -> list[list[dict[str, str]]]:
    rng = random.Random(11)
    return [
        [{"role": "user", "content": tasks.sample(tasks.TASKS[i % len(tasks.TASKS)], rng).prompt}]
        for i in range(n)
    ]


async def one(
    client: httpx.AsyncClient, messages: list[dict[str, str]], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """One streaming chat request, read the way vLLM's serving benchmark reads it: raw HTTP, the
    SSE lines parsed as they come, TTFT at the first chunk with content. (The `openai` client
    parses every chunk into pydantic models: ~2.7 ms more per TTFT measured here, and CPU on the
    cores the system under test uses. The e2e tests use it unchanged.)"""
    body = {
        "model": "sy-tiny",
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "min_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    ttft = None
    tokens = 0
    info = None
    async with client.stream("POST", "/chat/completions", json=body, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            choices = chunk.get("choices") or []
            if ttft is None and choices and (choices[0].get("delta") or {}).get("content"):
                ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
                info = chunk.get("switchyard")
    return {"ttft_s": ttft, "tokens": tokens, "seconds": time.perf_counter() - t0, "switchyard": info}


async def workload(
    base_url: str,
    api_key: str,
    concurrency: int,
    n: int,
    headers: Callable[[], dict[str, str]] | None = None,
    warm_up: bool = True,
) -> dict[str, Any]:
    """n streaming requests, `concurrency` at a time; `headers` makes each request's extra headers."""
    client = httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=300,
        limits=httpx.Limits(max_connections=concurrency + 2),
    )
    ps = prompts(n)
    for p in ps[:2] if warm_up else []:  # warm-up, not measured
        await one(client, p)
    sem = asyncio.Semaphore(concurrency)

    async def guarded(p: list[dict[str, str]]) -> dict[str, Any]:
        async with sem:
            return await one(client, p, headers() if headers else None)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(guarded(p) for p in ps))
    wall = time.perf_counter() - t0
    ttfts = [r["ttft_s"] * 1000 for r in results if r["ttft_s"] is not None]
    tokens = sum(r["tokens"] for r in results)
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "requests": n,
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_p50_ms": round(pct(ttfts, 0.5), 2),
        "ttft_p99_ms": round(pct(ttfts, 0.99), 2),
    }
    hops: dict[str, list[float]] = {}
    for r in results:
        for row in (r["switchyard"] or {}).get("breakdown", []):
            name = row["stage"] if row["stage"] != "queue" else f"hop:{row['topic']}"
            if "parent" not in row:
                hops.setdefault(name, []).append(float(row["duration_ms"]))
    if hops:
        out["breakdown_p50_ms"] = {k: round(statistics.median(v), 3) for k, v in hops.items()}
    await client.aclose()
    return out


async def after_idle(base_url: str, api_key: str, probes: int = 3) -> dict[str, Any]:
    """TTFT of single requests each sent after an idle spell longer than SY_KAFKA_IDLE_AFTER_S:
    what the readers' idle fetch wait costs the first request (docs/stage-rules.md: idle readers)."""
    from shared.runtime.config import Settings

    from .stack import overrides

    default = Settings.model_fields["kafka_idle_after_s"].default
    idle_s = float(overrides().get("SY_KAFKA_IDLE_AFTER_S", default)) + 2
    client = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=300)
    ttfts = []
    for p in prompts(probes):
        await asyncio.sleep(idle_s)
        r = await one(client, p)
        if r["ttft_s"] is not None:
            ttfts.append(round(r["ttft_s"] * 1000, 2))
    await client.aclose()
    return {
        "idle_s": idle_s,
        "ttft_ms": ttfts,
        "ttft_p50_ms": round(statistics.median(ttfts), 2) if ttfts else None,
    }


def wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(url)


def start_vllm_server(model_dir: Path, var_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    from services.vllm_worker.engine import engine_environment
    from shared.runtime.config import load_settings

    settings = load_settings(var_dir=var_dir, vllm_model_path=str(model_dir))
    engine_environment(settings)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "sy-tiny",
        "--dtype",
        settings.vllm_dtype,
        "--max-model-len",
        str(settings.vllm_max_model_len),
        "--max-num-seqs",
        str(settings.vllm_max_num_seqs),
        "--enforce-eager",
        "--stream-interval",
        str(settings.vllm_stream_interval),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--seed",
        "0",
        "--disable-log-stats",
    ]
    log = open(var_dir / "vllm-server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    wait_http(f"http://127.0.0.1:{port}/health", 300)
    return proc, f"http://127.0.0.1:{port}/v1"


SERVING_PATH = ["gateway", "preprocess", "cache", "router", "vllm_worker"]


def start_pipeline(
    model_dir: Path,
    var_dir: Path,
    cache: bool = False,
    single_pool: bool = True,
    ready_timeout_s: float = 300,
    services: list[str] | None = None,
    **extra_env: str,
) -> tuple[subprocess.Popen[bytes], str]:
    """`switchyard up` in var_dir; single_pool=False keeps the default pools (vLLM and Triton);
    `services` starts only those (default: every service, as `make run`)."""
    env: dict[str, str] = {
        # The serving workloads repeat temperature-0 prompts; the `cache` scenario turns it on.
        "SY_CACHE_ENABLED": str(cache).lower(),
    }
    if single_pool:  # one vLLM pool, as the engine baselines have: `pools` measures Triton's
        env["SY_POOLS"] = json.dumps(
            [{"name": "vllm", "engine": "vllm", "models": ["sy-tiny"], "max_lora_rank": 8}]
        )
    env.update(extra_env)
    proc, endpoints = start_stack(
        model_dir, var_dir, log_name="pipeline.log", ready_timeout_s=ready_timeout_s, services=services, **env
    )
    return proc, gateway_url(endpoints)


def run_direct_engine(
    model_dir: Path, levels: list[tuple[int, int]], executor: str = "auto", placement: str = "all"
) -> list[dict[str, Any]]:
    rows = run_result(
        "loadtests.direct_engine", str(model_dir), json.dumps(levels), str(MAX_TOKENS), executor, placement
    )
    return [{**r, "placement": placement} for r in rows]


def fastest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of several runs of one level, with every run's tokens/s kept beside it."""
    return stack_fastest(runs, "tokens_per_s", "tokens_per_s_of_each_run")


def engine_turn(
    model_dir: Path, levels: list[tuple[int, int]], placement: str, wide_executor: str
) -> list[list[dict[str, Any]]]:
    """One engine turn beside the stack rounds: on the cores `switchyard up` gives the engine, and
    (where it pins anything) on every core with `wide_executor`; each a list of levels."""
    turn = [run_direct_engine(model_dir, levels, "auto", placement)]
    if placement == "switchyard":
        wide = run_direct_engine(model_dir, levels, wide_executor, "all")
        turn.append([{**r, "executor": wide_executor} for r in wide])
    return turn


def paired_rounds(
    engine: list[list[dict[str, Any]]], ours: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per level, each Switchyard round against the faster engine run beside it (`stack.paired`):
    engine[i] ran before ours[i], engine[i + 1] after it; TTFT is read against the same run."""
    out = []
    for level in range(len(ours[0])):
        runs = [r[level] for r in ours]
        e_runs = [r[level] for r in engine]
        pair = paired([e["tokens_per_s"] for e in e_runs], [s["tokens_per_s"] for s in runs])
        rounds = []
        for s, r in zip(runs, pair["rounds"], strict=True):
            e = e_runs[r["engine_run"]]
            rounds.append(
                {
                    "tokens_per_s": s["tokens_per_s"],
                    "engine_tokens_per_s": e["tokens_per_s"],
                    "ratio": r["ratio"],
                    "added_ttft_p50_ms": round(s["ttft_p50_ms"] - e["ttft_p50_ms"], 2),
                    "added_ttft_p99_ms": round(s["ttft_p99_ms"] - e["ttft_p99_ms"], 2),
                }
            )
        out.append(
            {
                "concurrency": runs[0]["concurrency"],
                "median_ratio": pair["median_ratio"],
                "median_added_ttft_p50_ms": statistics.median(r["added_ttft_p50_ms"] for r in rounds),
                "median_added_ttft_p99_ms": statistics.median(r["added_ttft_p99_ms"] for r in rounds),
                "rounds": rounds,
            }
        )
    return out


def run_direct_best(model_dir: Path, levels: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """AsyncLLM on every core with each CPU executor (vLLM's worker process beside the engine
    core, and the model in the engine-core process as the worker runs it on one core); per level
    the faster: the baseline is the engine at its best."""
    sides = {ex: run_direct_engine(model_dir, levels, ex) for ex in baseline_executors()}
    out = []
    for i in range(len(levels)):
        runs = {ex: side[i] for ex, side in sides.items()}
        ex, top = max(runs.items(), key=lambda kv: kv[1]["tokens_per_s"])
        out.append(
            {
                **top,
                "executor": ex,
                "tokens_per_s_by_executor": {e: r["tokens_per_s"] for e, r in runs.items()},
            }
        )
    return out


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    from shared.devstack.models.build import build_model

    model_dir = build_model("sy-tiny", ROOT / "var" / "models", progress=False)
    var_dir = (out / "pipeline-var").resolve()
    var_dir.mkdir(parents=True, exist_ok=True)
    # 160 at 8: 48 requests were ~1.5 s of load, and two runs on one stack differed by up to 17 %.
    n1, n8 = (8, 16) if quick else (32, 160)
    levels = [(1, n1), (8, n8)]

    rounds = 1 if quick else ROUNDS

    direct = run_direct_best(model_dir, levels)

    proc, url = start_vllm_server(model_dir, var_dir)
    try:
        engine = [await workload(url, "none", c, n) for c, n in levels]
    finally:
        stop_process(proc, timeout_s=30)

    # The headline pair, in turns: the engine, then a fresh whole stack, then the engine again,
    # `rounds` times. Each engine turn runs it on the cores `switchyard up` gives it (its front end
    # on the services' core, as in the vLLM worker) and on every core with the CPU executor that
    # was faster there above; per level the faster placement is the round's baseline.
    placement = "switchyard" if switchyard_placement() else "all"
    wide_executor = direct[-1].get("executor", "auto")
    engine_turns = [engine_turn(model_dir, levels, placement, wide_executor)]
    ours_rounds: list[list[dict[str, Any]]] = []
    idle_probe: list[dict[str, Any]] = []
    for i in range(rounds):
        proc, url = start_pipeline(model_dir, var_dir)
        try:
            with client_on_services_cores():
                ours_rounds.append([await workload(url, "sk-switchyard-local", c, n) for c, n in levels])
                if i == 0:
                    idle_probe = await after_idle(url, "sk-switchyard-local", 1 if quick else 2)
        finally:
            stop_stack(proc)
        engine_turns.append(engine_turn(model_dir, levels, placement, wide_executor))
    paired_engine = [[fastest(list(runs)) for runs in zip(*turn, strict=True)] for turn in engine_turns]
    pairs = paired_rounds(paired_engine, ours_rounds)
    ours = [fastest(list(runs)) for runs in zip(*ours_rounds, strict=True)]
    same_cores = (
        [fastest([turn[0][level] for turn in engine_turns]) for level in range(len(levels))]
        if placement == "switchyard"
        else None
    )

    # The same workload with only the services a chat request crosses. In production reward,
    # batch, registry and the Triton worker run on their own machines; here every idle service
    # polls the broker on the engine's two cores (README: where the CPU goes).
    proc, url = start_pipeline(model_dir, var_dir, services=SERVING_PATH)
    try:
        with client_on_services_cores():
            path_only = [await workload(url, "sk-switchyard-local", c, n) for c, n in levels]
    finally:
        stop_stack(proc)

    # The whole stack again without giving the engine cores of its own (README: the engine's own
    # cores): what the split is worth, measured in the same run.
    proc, url = start_pipeline(model_dir, var_dir, SY_SERVICE_CPUS="off")
    try:
        unpinned = [await workload(url, "sk-switchyard-local", c, n) for c, n in levels]
    finally:
        stop_stack(proc)

    # The services pinned, but the engine on every core, theirs too (SY_ENGINE_CPUS=shared): what
    # giving the engine cores of its own (the default) is worth.
    proc, url = start_pipeline(model_dir, var_dir, SY_ENGINE_CPUS="shared")
    try:
        with client_on_services_cores():
            shared_cores = [await workload(url, "sk-switchyard-local", c, n) for c, n in levels]
    finally:
        stop_stack(proc)

    # The engine again after the stacks, and per level its fastest run counts, on every core before
    # or after or on Switchyard's engine core: this box's speed drifts by a third within minutes, and
    # a baseline caught in a slow minute must not flatter the pipeline (seen: AsyncLLM on both cores
    # at 1,550 tok/s, then on one core at 2,294).
    again = run_direct_best(model_dir, levels)
    beside = [run for turn in engine_turns for run in turn]  # each placement's run of each turn
    every_engine_run = [[d, a, *runs] for d, a, *runs in zip(direct, again, *beside, strict=True)]
    direct = [fastest(runs) for runs in every_engine_run]

    comparison = []
    for level, (d, e, s, pr) in enumerate(zip(direct, engine, ours, pairs, strict=True)):
        row: dict[str, Any] = {
            "concurrency": e["concurrency"],
            # The target figures: each round against the engine's runs beside it, median of rounds.
            "tokens_per_s_ratio_vs_asyncllm": pr["median_ratio"],
            "added_ttft_p50_ms_vs_asyncllm": pr["median_added_ttft_p50_ms"],
            "added_ttft_p99_ms_vs_asyncllm": pr["median_added_ttft_p99_ms"],
            "paired_rounds": pr["rounds"],
            # Stricter, across minutes: Switchyard's best round against the engine's fastest run.
            "tokens_per_s_ratio_best_vs_fastest_asyncllm": round(s["tokens_per_s"] / d["tokens_per_s"], 3),
            "tokens_per_s_ratio_vs_openai_server": round(s["tokens_per_s"] / e["tokens_per_s"], 3),
            "added_ttft_p50_ms_vs_openai_server": round(s["ttft_p50_ms"] - e["ttft_p50_ms"], 2),
        }
        if same_cores:
            # What the core split alone leaves of the engine at its best, in each turn.
            row["core_split_ceiling"] = split_ceiling(
                [t[0][level]["tokens_per_s"] for t in engine_turns],
                [t[1][level]["tokens_per_s"] for t in engine_turns],
            )
            same = same_cores[level]
            row["tokens_per_s_ratio_vs_asyncllm_on_the_same_cores"] = round(
                s["tokens_per_s"] / same["tokens_per_s"], 3
            )
            row["added_ttft_p50_ms_vs_asyncllm_on_the_same_cores"] = round(
                s["ttft_p50_ms"] - same["ttft_p50_ms"], 2
            )
        bd = s.get("breakdown_p50_ms", {})
        overhead = sum(v for k, v in bd.items() if k != "vllm_worker")  # everything but the engine's own work
        if overhead:
            row["pipeline_overhead_p50_ms"] = round(overhead, 3)
            row["hop_p50_ms"] = {k: v for k, v in bd.items() if k.startswith("hop:")}
            row["hop_share_of_overhead"] = {
                k: round(v / overhead, 3) for k, v in bd.items() if k.startswith("hop:")
            }
        comparison.append(row)
    for row, d, p, u, sh in zip(comparison, direct, path_only, unpinned, shared_cores, strict=True):
        for name, run_ in (("serving_path_only", p), ("service_cpus_off", u), ("engine_cpus_shared", sh)):
            row[name] = {
                "tokens_per_s_ratio_vs_asyncllm": round(run_["tokens_per_s"] / d["tokens_per_s"], 3),
                "added_ttft_p50_ms_vs_asyncllm": round(run_["ttft_p50_ms"] - d["ttft_p50_ms"], 2),
            }
    return {
        "scenario": "pipeline-vs-engine",
        "workload": {"max_tokens": MAX_TOKENS, "min_tokens": MAX_TOKENS, "temperature": 0, "stream": True},
        "asyncllm_in_process": direct,
        "asyncllm_on_switchyards_engine_cores": same_cores,
        "vllm_openai_server": engine,
        "switchyard": ours,
        "switchyard_rounds": ours_rounds,
        "switchyard_after_idle": idle_probe,
        "switchyard_serving_path_only": {"services": SERVING_PATH, "levels": path_only},
        "switchyard_service_cpus_off": unpinned,
        "switchyard_engine_cpus_shared": shared_cores,
        "comparison": comparison,
        "summary": comparison,
    }
