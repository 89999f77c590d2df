"""The engine baseline: vLLM's AsyncLLM in-process, built by the worker's own `engine_args` (so
the flags are the worker's), in a subprocess so that its engine is gone before the next one starts.

A baseline module runs as `python -m <module> ARGS` and prints its result as one line `RESULT
<json>` (print_result); the scenario reads it back with run_result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from shared.runtime.cpus import has_gpu

from .stack import ROOT

PREFIX = "RESULT "


def baseline_executors() -> tuple[str, ...]:
    """SY_VLLM_CPU_EXECUTOR values an engine baseline runs with, the faster counting: on a CPU host
    both layouts (vLLM's two processes, or the model in the engine-core process), as neither wins
    every workload on every core count (docs/workers.md); on a GPU there is one."""
    return ("auto",) if has_gpu() else ("mp", "uni")


def open_asyncllm(model_dir: str, **settings: Any) -> tuple[Any, Any]:
    """(AsyncLLM, its engine args) for sy-tiny in model_dir with the worker's flags; `settings`
    as load_settings takes them (vllm_enable_lora, vllm_cpu_executor)."""
    from services.vllm_worker.engine import engine_args, engine_environment
    from shared.runtime.config import load_settings

    loaded = load_settings(vllm_model_path=model_dir, **settings)
    engine_environment(loaded)
    from vllm.v1.engine.async_llm import AsyncLLM

    args = engine_args(loaded)
    return AsyncLLM.from_engine_args(args), args


def prompt_ids(tok: Any, messages: list[dict[str, str]]) -> list[int]:
    """The chat template applied and tokenized, as the worker sends a chat request to the engine."""
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tok.encode(text, add_special_tokens=False))


def print_result(result: Any) -> None:
    print(PREFIX + json.dumps(result), flush=True)


def parse_result(stdout: str) -> Any:
    """The JSON of the `RESULT ` line, None when there is none."""
    line = next((x for x in stdout.splitlines() if x.startswith(PREFIX)), None)
    return None if line is None else json.loads(line[len(PREFIX) :])


def run_result(module: str, *args: str, timeout_s: float = 1200) -> Any:
    """`python -m module args` in a subprocess without the caller's SY_ settings; its RESULT."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    result = parse_result(proc.stdout)
    if result is None:
        raise RuntimeError(proc.stderr[-3000:])
    return result
