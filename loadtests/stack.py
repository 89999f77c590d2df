"""Start a stack for a scenario: `switchyard up` in its own var folder, as `make run` runs it.

One starter for every scenario that needs the whole pipeline: the environment (no inherited
SY_*, quiet logs, a free broker port, the project's Triton venv), the stale endpoints file of a
killed earlier run removed before the start (else the caller talks to a dead stack), and the wait
for `var/run/endpoints.json`, failing with the log's tail when the stack dies or never comes up.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shared.runtime.cpus import has_gpu
from shared.runtime.procs import free_port

ROOT = Path(__file__).resolve().parent.parent


def switchyard_placement() -> tuple[frozenset[int], frozenset[int]] | None:
    """(engine cores, services' cores) as `switchyard up` places them on this host by default
    (SY_SERVICE_CPUS=auto, SY_ENGINE_CPUS=own), or None where it pins nothing (GPU, one core)."""
    from shared.runtime.cpus import engine_cpus, service_cpus

    every = frozenset(os.sched_getaffinity(0))
    services = service_cpus("auto", every)
    return None if services is None else (engine_cpus("own", every, services), services)


def paired(engine: Sequence[float], ours: Sequence[float]) -> dict[str, Any]:
    """Each stack round in `ours` against the faster engine run beside it (engine[i] ran just
    before ours[i], engine[i + 1] just after), and the median round. This host's speed drifts by
    a third within minutes: a ratio read across minutes measures the drift as much as the stack."""
    rounds = []
    for i, s in enumerate(ours):
        j = i if engine[i] >= engine[i + 1] else i + 1
        rounds.append({"stack": s, "engine": engine[j], "engine_run": j, "ratio": round(s / engine[j], 3)})
    return {"median_ratio": statistics.median(r["ratio"] for r in rounds), "rounds": rounds}


def split_ceiling(own: Sequence[float], wide: Sequence[float]) -> dict[str, Any]:
    """The engine on the cores `switchyard up` gives it against the engine on every core, turn by
    turn (own[i] and wide[i] ran in the same minutes): the most a pipeline around the engine on its
    own cores can reach against the engine at its best on this host, before it costs anything."""
    per_turn = [round(o / w, 3) for o, w in zip(own, wide, strict=True)]
    return {"median": round(statistics.median(per_turn), 3), "per_turn": per_turn}


def fastest(runs: Sequence[dict[str, Any]], metric: str, each_key: str) -> dict[str, Any]:
    """The fastest of several runs of one workload (on a shared box the least disturbed), with
    every run's `metric` kept beside it under `each_key`."""
    top = max(runs, key=lambda r: r[metric])
    return {**top, each_key: [r[metric] for r in runs]}


@contextmanager
def client_on_services_cores() -> Iterator[None]:
    """Send a workload from the services' cores, never the engine's, as the in-process baseline
    does (its requests come from the front end, on those cores): a client elsewhere costs a
    server nothing. Unpinned, the load generator's parsing of every SSE chunk ran on the engine's
    core half the time: 1,375-1,523 tok/s at concurrency 8 vs 1,745-1,901 pinned (docs/workers.md). Wrap
    only the requests: a stack started from here would inherit the pin and see one core."""
    placement = switchyard_placement()
    before = os.sched_getaffinity(0)
    if placement is not None:
        os.sched_setaffinity(0, placement[1])  # this thread: the event loop sending the requests
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def placed_asyncllm(settings: Any, placement: str) -> Any:
    """vLLM's AsyncLLM built from the worker's `engine_args`. Placement `switchyard`: its engine
    process on the cores `switchyard up` gives the engine and this process (the front end) on the
    services' cores, as in the vLLM worker; `all`: every core."""
    from services.vllm_worker.engine import engine_args, engine_environment
    from shared.runtime.cpus import pin_process

    cores = switchyard_placement() if placement == "switchyard" else None
    if cores is not None:
        pin_process(cores[0])  # the engine process forked below keeps these
    engine_environment(settings)  # after the pin: the executor follows the engine's cores, as in the worker
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = AsyncLLM.from_engine_args(engine_args(settings))
    if cores is not None:
        pin_process(cores[1])
    return llm


def models_dir() -> Path:
    """Where the benchmarks find (or build) the local models: SY_MODELS_DIR, as the services read
    it, else var/models (what `switchyard models build` fills)."""
    return Path(os.environ.get("SY_MODELS_DIR") or ROOT / "var" / "models")


def overrides() -> dict[str, str]:
    """LOADTESTS_STACK_ENV="SY_A=1 SY_B=2": settings for every stack a scenario starts (an A/B
    of one setting); the shell's own SY_* are not passed on, so a stray export changes nothing."""
    pairs = (item.partition("=") for item in os.environ.get("LOADTESTS_STACK_ENV", "").split())
    return {k: v for k, sep, v in pairs if sep and k.startswith("SY_")}


def stack_env(model_dir: Path, var_dir: Path, **extra_env: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    env.update(
        SY_VAR_DIR=str(var_dir),
        SY_MODELS_DIR=str(model_dir.parent),
        SY_LOG_LEVEL="WARNING",
        SY_KAFKA_PORT=str(free_port()),
        SY_VLLM_ENABLE_LORA="false",
        # No canary requests in what a benchmark measures (they would also wake idle readers).
        SY_CANARY_INTERVAL_S="0",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides())
    env.update(extra_env)
    return env


def start_stack(
    model_dir: Path,
    var_dir: Path,
    *,
    log_name: str = "stack.log",
    services: list[str] | None = None,
    ready_timeout_s: float = 420,
    **extra_env: str,
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """`switchyard up [--services ...]` in var_dir; returns the process and its endpoints."""
    var_dir.mkdir(parents=True, exist_ok=True)
    venv = ROOT / "var" / "triton-venv"  # the project's (make bench creates it), not one per run
    if venv.exists() and not (var_dir / "triton-venv").exists():
        (var_dir / "triton-venv").symlink_to(venv)
    endpoints = var_dir / "run" / "endpoints.json"
    endpoints.unlink(missing_ok=True)  # a killed earlier run's file names a dead stack
    log_path = var_dir / log_name
    argv = [
        sys.executable,
        "-m",
        "shared.devstack.cli",
        "up",
        *(["--services", ",".join(services)] if services else []),
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=stack_env(model_dir, var_dir, **extra_env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + ready_timeout_s
    while not endpoints.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_stack(proc)
            raise RuntimeError(log_path.read_text(errors="replace")[-3000:])
        time.sleep(0.5)
    return proc, json.loads(endpoints.read_text())


def gateway_url(endpoints: dict[str, Any]) -> str:
    return endpoints["services"]["gateway"]["url"] + "/v1"


def stop_stack(proc: subprocess.Popen[bytes], timeout_s: float = 90) -> None:
    """SIGTERM (the launcher drains and stops its children), SIGKILL to the group after timeout_s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_result(module: str, *args: str, timeout_s: float = 1200) -> Any:
    """`python -m module args` in a subprocess without the caller's SY_ settings (its engine is gone
    before the next one starts); returns the JSON it printed after `RESULT `."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(line[7:])


def baseline_executors() -> tuple[str, ...]:
    """SY_VLLM_CPU_EXECUTOR values an engine baseline runs with, the faster counting: on a CPU host
    both layouts (vLLM's two processes, or the model in the engine-core process), as neither wins
    every workload on every core count (docs/workers.md); on a GPU there is one."""
    return ("auto",) if has_gpu() else ("mp", "uni")
