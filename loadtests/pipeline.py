"""pipeline-vs-engine: the same streaming workload (a) against vLLM's AsyncLLM called in-process,
(b) against vLLM's own OpenAI server and (c) through Switchyard's gateway (Kafka hops, stages,
worker), one after the other in one run, all with the worker's engine flags (LoRA off on every
side: the lora-scaling scenario measures LoRA).

Reports tokens/s and their ratio, TTFT p50/p99, the TTFT Switchyard adds over the in-process
engine, and each Kafka hop's share (from the per-request breakdown in the final chunk).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

from shared.embedded.procs import free_port, stop_process
from shared.models import tasks

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 64


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
    client: openai.AsyncOpenAI, messages: list[dict[str, str]], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    t0 = time.perf_counter()
    ttft = None
    tokens = 0
    info = None
    stream = await client.chat.completions.create(
        model="sy-tiny",
        messages=messages,
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"min_tokens": MAX_TOKENS},
        extra_headers=headers,
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content and ttft is None:
            ttft = time.perf_counter() - t0
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
            info = (chunk.model_extra or {}).get("switchyard")
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
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
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
    await client.close()
    return out


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
    from shared.config import load_settings

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


def start_pipeline(
    model_dir: Path,
    var_dir: Path,
    cache: bool = False,
    single_pool: bool = True,
    ready_timeout_s: float = 300,
    **extra_env: str,
) -> tuple[subprocess.Popen[bytes], str]:
    """`switchyard up` in var_dir; single_pool=False keeps the default pools (vLLM and Triton)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    env.update(
        SY_VAR_DIR=str(var_dir),
        SY_MODELS_DIR=str(model_dir.parent),
        SY_LOG_LEVEL="WARNING",
        SY_KAFKA_PORT=str(free_port()),
        SY_VLLM_ENABLE_LORA="false",
        # The serving workloads repeat temperature-0 prompts; the `cache` scenario turns it on.
        SY_CACHE_ENABLED=str(cache).lower(),
        # One vLLM pool, as the engine baselines have: the `pools` scenario measures Triton's.
        SY_POOLS=json.dumps([{"name": "vllm", "engine": "vllm", "models": ["sy-tiny"], "max_lora_rank": 8}]),
        PYTHONUNBUFFERED="1",
    )
    if not single_pool:
        del env["SY_POOLS"]
    env.update(extra_env)
    endpoints = var_dir / "run" / "endpoints.json"
    endpoints.unlink(missing_ok=True)  # a killed earlier run's file names a dead stack
    log = open(var_dir / "pipeline.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "shared.cli", "up"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + ready_timeout_s
    while not endpoints.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((var_dir / "pipeline.log").read_text()[-3000:])
        time.sleep(0.5)
    url = json.loads(endpoints.read_text())["services"]["gateway"]["url"]
    return proc, url + "/v1"


def run_direct_engine(model_dir: Path, levels: list[tuple[int, int]]) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtests.direct_engine",
            str(model_dir),
            json.dumps(levels),
            str(MAX_TOKENS),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(line[7:])


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    from shared.models.build import build_model

    model_dir = build_model("sy-tiny", ROOT / "var" / "models", progress=False)
    var_dir = (out / "pipeline-var").resolve()
    var_dir.mkdir(parents=True, exist_ok=True)
    n1, n8 = (8, 16) if quick else (24, 48)
    levels = [(1, n1), (8, n8)]

    direct = run_direct_engine(model_dir, levels)

    proc, url = start_vllm_server(model_dir, var_dir)
    try:
        engine = [await workload(url, "none", c, n) for c, n in levels]
    finally:
        stop_process(proc, timeout_s=30)

    proc, url = start_pipeline(model_dir, var_dir)
    try:
        ours = [await workload(url, "sk-switchyard-local", c, n) for c, n in levels]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)

    comparison = []
    for d, e, s in zip(direct, engine, ours, strict=True):
        row: dict[str, Any] = {
            "concurrency": e["concurrency"],
            "tokens_per_s_ratio_vs_asyncllm": round(s["tokens_per_s"] / d["tokens_per_s"], 3),
            "tokens_per_s_ratio_vs_openai_server": round(s["tokens_per_s"] / e["tokens_per_s"], 3),
            "added_ttft_p50_ms_vs_asyncllm": round(s["ttft_p50_ms"] - d["ttft_p50_ms"], 2),
            "added_ttft_p99_ms_vs_asyncllm": round(s["ttft_p99_ms"] - d["ttft_p99_ms"], 2),
            "added_ttft_p50_ms_vs_openai_server": round(s["ttft_p50_ms"] - e["ttft_p50_ms"], 2),
        }
        bd = s.get("breakdown_p50_ms", {})
        overhead = sum(v for k, v in bd.items() if k != "vllm_worker")  # everything but the engine's own work
        if overhead:
            row["pipeline_overhead_p50_ms"] = round(overhead, 3)
            row["hop_p50_ms"] = {k: v for k, v in bd.items() if k.startswith("hop:")}
            row["hop_share_of_overhead"] = {
                k: round(v / overhead, 3) for k, v in bd.items() if k.startswith("hop:")
            }
        comparison.append(row)
    return {
        "scenario": "pipeline-vs-engine",
        "workload": {"max_tokens": MAX_TOKENS, "min_tokens": MAX_TOKENS, "temperature": 0, "stream": True},
        "asyncllm_in_process": direct,
        "vllm_openai_server": engine,
        "switchyard": ours,
        "comparison": comparison,
        "summary": comparison,
    }
