"""Start a stack for a scenario: `switchyard up` in its own var folder, as `make run` runs it.

One starter for every scenario that needs the whole pipeline: the environment (no inherited
SY_*, quiet logs, a free broker port, the project's Triton venv), the stale endpoints file of a
killed earlier run removed before the start (else the caller talks to a dead stack), and the wait
for `var/run/endpoints.json`, failing with the log's tail when the stack dies or never comes up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.runtime.procs import free_port, stop_process

ROOT = Path(__file__).resolve().parents[2]
# One vLLM pool, as the engine baselines have (the `pools` scenario measures Triton's).
SINGLE_POOL = [{"name": "vllm", "engine": "vllm", "models": ["sy-tiny"], "max_lora_rank": 8}]


def models_dir() -> Path:
    """Where the benchmarks find (or build) the local models: SY_MODELS_DIR, as the services read
    it, else var/models (what `switchyard models build` fills)."""
    return Path(os.environ.get("SY_MODELS_DIR") or ROOT / "var" / "models")


def sy_tiny() -> Path:
    """The sy-tiny model every scenario serves, built once and reused."""
    from shared.devstack.models.build import build_model

    return build_model("sy-tiny", models_dir(), progress=False)


def var_dir(out: Path, name: str) -> Path:
    """The scenario's own state folder under the results folder (kept between runs)."""
    path = (out / name).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def overrides() -> dict[str, str]:
    """LOADTESTS_STACK_ENV="SY_A=1 SY_B=2": settings for every stack a scenario starts (an A/B
    of one setting); the shell's own SY_* are not passed on, so a stray export changes nothing."""
    pairs = (item.partition("=") for item in os.environ.get("LOADTESTS_STACK_ENV", "").split())
    return {k: v for k, sep, v in pairs if sep and k.startswith("SY_")}


def forget_cache_entries(var_dir: Path) -> None:
    """Drop what an earlier run stored in the embedded Milvus (its data, not its unpacked binaries):
    a scenario whose prompts are new must not find last run's answers to them."""
    shutil.rmtree(var_dir / "milvus" / "data", ignore_errors=True)


def stack_env(model_dir: Path, var_dir: Path, **extra_env: str) -> dict[str, str]:
    """The stack's environment: the caller's settings over the benchmark defaults over overrides()."""
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
    argv = [sys.executable, "-m", "shared.devstack.cli", "up"]
    argv += ["--services", ",".join(services)] if services else []
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
    stop_process(proc, timeout_s)


@dataclass
class Running:
    """A started stack: its launcher process, its var folder and the endpoints it wrote."""

    proc: subprocess.Popen[bytes]
    var_dir: Path
    endpoints: dict[str, Any]

    @property
    def url(self) -> str:
        return gateway_url(self.endpoints)

    @property
    def endpoints_path(self) -> Path:
        return self.var_dir / "run" / "endpoints.json"

    def reread(self) -> dict[str, Any]:
        """The endpoints file as it is now (the launcher records restarts and new pids in it)."""
        self.endpoints = json.loads(self.endpoints_path.read_text())
        return self.endpoints

    def restarts(self) -> dict[str, Any]:
        """The services the launcher restarted, with their exits, as of the last reread()."""
        return {n: i.get("exits", {}) for n, i in self.endpoints["services"].items() if i.get("exits")}


def pipeline_env(cache: bool = False, single_pool: bool = True, **extra_env: str) -> dict[str, str]:
    """A scenario's settings: the cache off unless asked (the serving workloads repeat
    temperature-0 prompts), one vLLM pool unless single_pool=False (the default pools)."""
    env = {"SY_CACHE_ENABLED": str(cache).lower()}
    if single_pool:
        env["SY_POOLS"] = json.dumps(SINGLE_POOL)
    return {**env, **extra_env}


@contextmanager
def pipeline(
    model_dir: Path,
    var_dir: Path,
    *,
    cache: bool = False,
    single_pool: bool = True,
    services: list[str] | None = None,
    ready_timeout_s: float = 300,
    stop_timeout_s: float = 120,
    log_name: str = "pipeline.log",
    **extra_env: str,
) -> Iterator[Running]:
    """`switchyard up` in var_dir for the with-block, stopped after it whatever happens;
    `services` starts only those (default: every service, as `make run`)."""
    env = pipeline_env(cache, single_pool, **extra_env)
    proc, endpoints = start_stack(
        model_dir, var_dir, log_name=log_name, services=services, ready_timeout_s=ready_timeout_s, **env
    )
    try:
        yield Running(proc, var_dir, endpoints)
    finally:
        stop_stack(proc, stop_timeout_s)


def whole_stack(model_dir: Path, var_dir: Path) -> AbstractContextManager[Running]:
    """The stack exactly as `make run` starts it (cache on, the default pools, LoRA as its
    default), for the long scenarios (soak, broker-capacity): up to 15 minutes to come up."""
    from shared.runtime.config import Settings

    lora = str(Settings.model_fields["vllm_enable_lora"].default).lower()
    return pipeline(
        model_dir,
        var_dir,
        cache=True,
        single_pool=False,
        ready_timeout_s=900,
        stop_timeout_s=180,
        SY_VLLM_ENABLE_LORA=lora,
    )
