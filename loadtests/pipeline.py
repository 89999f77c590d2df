"""pipeline-vs-engine: the same streaming workload (a) against vLLM's AsyncLLM called in-process,
(b) against vLLM's own OpenAI server and (c) through Switchyard's gateway (Kafka hops, stages,
worker) — the whole stack as `make run` starts it, then (d) only the services a chat request
crosses — one after the other in one run, all with the worker's engine flags (LoRA off on every
side: the lora-scaling scenario measures LoRA). Information, not a target.

Reports tokens/s and their ratio, TTFT p50/p99, the TTFT Switchyard adds over the in-process
engine, and each Kafka hop's share (from the per-request breakdown in the final chunk), plus the
TTFT of single requests sent after the stack has sat idle (the readers' idle fetch wait).
LOADTESTS_STACK_ENV sets a setting in every stack (A/Bs).

The engine and a fresh whole stack take turns, ROUNDS times (loadtests.harness.pairing): each
stack round is read against the faster engine turn beside it and the median round is the figure.
Beside it, stricter: Switchyard's best round against the engine's fastest run anywhere in the
scenario (with each CPU executor, before and after the stacks), every run kept in the JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from shared.runtime.procs import free_port, stop_process

from .harness.client import MAX_TOKENS, gateway_client, one, prompts, workload
from .harness.engine import baseline_executors, run_result
from .harness.pairing import fastest, paired
from .harness.stack import overrides, pipeline, sy_tiny, var_dir

ROUNDS = 3  # engine and whole stack take turns this many times
SERVING_PATH = ["gateway", "preprocess", "cache", "router", "vllm_worker"]
API_KEY = "sk-switchyard-local"
Levels = list[tuple[int, int]]


async def after_idle(base_url: str, api_key: str, probes: int = 3) -> dict[str, Any]:
    """TTFT of single requests each sent after an idle spell longer than SY_KAFKA_IDLE_AFTER_S:
    what the readers' idle fetch wait costs the first request (docs/stage-rules.md: idle readers)."""
    from shared.runtime.config import Settings

    default = Settings.model_fields["kafka_idle_after_s"].default
    idle_s = float(overrides().get("SY_KAFKA_IDLE_AFTER_S", default)) + 2
    client = gateway_client(base_url, api_key)
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
    """vLLM's own OpenAI server with the worker's flags."""
    from services.vllm_worker.engine import engine_environment
    from shared.runtime.config import load_settings

    s = load_settings(var_dir=var_dir, vllm_model_path=str(model_dir))
    engine_environment(s)
    port = free_port()
    flags = {
        "--model": str(model_dir),
        "--served-model-name": "sy-tiny",
        "--dtype": s.vllm_dtype,
        "--max-model-len": str(s.vllm_max_model_len),
        "--max-num-seqs": str(s.vllm_max_num_seqs),
        "--stream-interval": str(s.vllm_stream_interval),
        "--host": "127.0.0.1",
        "--port": str(port),
        "--seed": "0",
    }
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    cmd += [x for kv in flags.items() for x in kv] + ["--enforce-eager", "--disable-log-stats"]
    log = open(var_dir / "vllm-server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    wait_http(f"http://127.0.0.1:{port}/health", 300)
    return proc, f"http://127.0.0.1:{port}/v1"


def run_direct_engine(model_dir: Path, levels: Levels, executor: str = "auto") -> list[dict[str, Any]]:
    """loadtests.direct_engine in a subprocess: one summary per level."""
    rows = run_result(
        "loadtests.direct_engine", str(model_dir), json.dumps(levels), str(MAX_TOKENS), executor
    )
    return [{**r, "executor": executor} for r in rows]


def level_fastest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of several runs of one level, with every run's tokens/s kept beside it."""
    return fastest(runs, "tokens_per_s", "tokens_per_s_of_each_run")


def run_direct_best(model_dir: Path, levels: Levels) -> list[dict[str, Any]]:
    """AsyncLLM with each CPU executor; per level the faster: the engine at its best."""
    sides = {ex: run_direct_engine(model_dir, levels, ex) for ex in baseline_executors()}
    out = []
    for i in range(len(levels)):
        runs = {ex: side[i] for ex, side in sides.items()}
        top = max(runs.values(), key=lambda r: r["tokens_per_s"])
        out.append({**top, "tokens_per_s_by_executor": {e: r["tokens_per_s"] for e, r in runs.items()}})
    return out


def paired_rounds(
    engine: list[list[dict[str, Any]]], ours: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per level, each Switchyard round against the faster engine run beside it (harness.pairing):
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


def hop_shares(breakdown: dict[str, float]) -> dict[str, Any]:
    """What the pipeline adds around the engine's own work (p50), and each Kafka hop's share of it."""
    overhead = sum(v for k, v in breakdown.items() if k != "vllm_worker")
    if not overhead:
        return {}
    hops = {k: v for k, v in breakdown.items() if k.startswith("hop:")}
    return {
        "pipeline_overhead_p50_ms": round(overhead, 3),
        "hop_p50_ms": hops,
        "hop_share_of_overhead": {k: round(v / overhead, 3) for k, v in hops.items()},
    }


def against(run: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    return {
        "tokens_per_s_ratio_vs_asyncllm": round(run["tokens_per_s"] / base["tokens_per_s"], 3),
        "added_ttft_p50_ms_vs_asyncllm": round(run["ttft_p50_ms"] - base["ttft_p50_ms"], 2),
    }


def compare(
    direct: dict[str, Any], server: dict[str, Any], ours: dict[str, Any], pair: dict[str, Any]
) -> dict[str, Any]:
    """One level: the paired figures, then the stricter best-vs-fastest and vLLM-server ones."""
    return {
        "concurrency": server["concurrency"],
        "tokens_per_s_ratio_vs_asyncllm": pair["median_ratio"],
        "added_ttft_p50_ms_vs_asyncllm": pair["median_added_ttft_p50_ms"],
        "added_ttft_p99_ms_vs_asyncllm": pair["median_added_ttft_p99_ms"],
        "paired_rounds": pair["rounds"],
        "tokens_per_s_ratio_best_vs_fastest_asyncllm": round(
            ours["tokens_per_s"] / direct["tokens_per_s"], 3
        ),
        "tokens_per_s_ratio_vs_openai_server": round(ours["tokens_per_s"] / server["tokens_per_s"], 3),
        "added_ttft_p50_ms_vs_openai_server": round(ours["ttft_p50_ms"] - server["ttft_p50_ms"], 2),
        **hop_shares(ours.get("breakdown_p50_ms", {})),
    }


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    model_dir = sy_tiny()
    var = var_dir(out, "pipeline-var")
    # 160 at 8: 48 requests were ~1.5 s of load, and two runs on one stack differed by up to 17 %.
    levels = [(1, 8), (8, 16)] if quick else [(1, 32), (8, 160)]
    before = run_direct_best(model_dir, levels)

    proc, url = start_vllm_server(model_dir, var)
    try:
        server = [await workload(url, "none", c, n) for c, n in levels]
    finally:
        stop_process(proc, timeout_s=30)

    # The engine (with the executor that was faster above), a fresh whole stack, the engine again.
    executor = before[-1]["executor"]
    engine_turns = [run_direct_engine(model_dir, levels, executor)]
    ours_rounds: list[list[dict[str, Any]]] = []
    idle_probe: dict[str, Any] = {}
    for i in range(1 if quick else ROUNDS):
        with pipeline(model_dir, var, stop_timeout_s=90) as stack:
            ours_rounds.append([await workload(stack.url, API_KEY, c, n) for c, n in levels])
            if i == 0:
                idle_probe = await after_idle(stack.url, API_KEY, 1 if quick else 2)
        engine_turns.append(run_direct_engine(model_dir, levels, executor))
    pairs = paired_rounds(engine_turns, ours_rounds)
    ours = [level_fastest(list(runs)) for runs in zip(*ours_rounds, strict=True)]

    # Only the services a chat request crosses. In production reward, batch, registry and the
    # Triton worker run on their own machines; here every idle service polls the broker.
    with pipeline(model_dir, var, services=SERVING_PATH, stop_timeout_s=90) as stack:
        path_only = [await workload(stack.url, API_KEY, c, n) for c, n in levels]

    # Per level the engine's fastest run anywhere in the scenario counts for the stricter figure:
    # this box's speed drifts by a third within minutes, and a baseline caught in a slow minute
    # must not flatter the pipeline.
    after = run_direct_best(model_dir, levels)
    direct = [level_fastest(list(runs)) for runs in zip(before, after, *engine_turns, strict=True)]
    comparison = []
    for d, e, s, pr, p in zip(direct, server, ours, pairs, path_only, strict=True):
        comparison.append({**compare(d, e, s, pr), "serving_path_only": against(p, d)})
    return {
        "scenario": "pipeline-vs-engine",
        "workload": {"max_tokens": MAX_TOKENS, "min_tokens": MAX_TOKENS, "temperature": 0, "stream": True},
        "asyncllm_in_process": direct,
        "vllm_openai_server": server,
        "switchyard": ours,
        "switchyard_rounds": ours_rounds,
        "switchyard_after_idle": idle_probe,
        "switchyard_serving_path_only": {"services": SERVING_PATH, "levels": path_only},
        "comparison": comparison,
        "summary": comparison,
    }
