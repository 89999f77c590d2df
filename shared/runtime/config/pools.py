"""The Models and pools section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, Field, field_validator

from shared.runtime.config.base import Section


class PoolConfig(BaseModel):
    """A worker pool the router may send requests to."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    engine: Literal["vllm", "triton"]
    device: Literal["gpu", "cpu", "edge"] = "cpu"
    models: list[str] = Field(min_length=1)
    modalities: list[Literal["text", "image", "audio"]] = ["text"]
    # Models that take the pool's media modalities; unset = all of them. A pool that serves a VLM
    # and text-only models (Triton: sy-vlm beside sy-tiny) says which model an image may go to.
    media_models: list[str] | None = None
    max_lora_rank: int = Field(default=0, ge=0)
    cost: float = Field(default=1.0, ge=0)
    # Engine knobs of this pool (issue 6), passed through where the engine supports them on that
    # device: vLLM dtype, quantization and cpu_offload_gb. Triton's precision is per model (sy-tiny-bf16).
    precision: str | None = None
    quantization: str | None = None
    cpu_offload_gb: float = Field(default=0.0, ge=0)

    @property
    def topic_suffix(self) -> str:
        return f"infer.{self.name}"

    def modalities_for(self, model: str) -> set[str]:
        """What this pool accepts for `model` (text only for a model not in media_models)."""
        if self.media_models is None or model in self.media_models:
            return set(self.modalities)
        return {"text"}


def _default_pools() -> list[PoolConfig]:
    return [
        PoolConfig(name="vllm", engine="vllm", device="cpu", models=["sy-tiny"], max_lora_rank=8),
        # The CPU/edge pool on Triton: the same model (and a bf16 variant only it serves), cheaper,
        # so batch traffic fills it while interactive traffic prefers the faster pool; and the
        # multimodal model, sy-vlm, the one model here that takes images and audio.
        PoolConfig(
            name="triton",
            engine="triton",
            device="edge",
            models=["sy-tiny", "sy-tiny-bf16", "sy-vlm"],
            modalities=["text", "image", "audio"],
            media_models=["sy-vlm"],
            cost=0.5,
        ),
    ]


class PoolSettings(Section):
    """The worker pools the router may send requests to, and where model weights live (docs/pools.md)."""

    title: ClassVar[str] = "Models and pools"

    models_dir: Path | None = Field(default=None, description="Default: <var_dir>/models")
    pools: list[PoolConfig] = Field(
        default_factory=_default_pools,
        description="JSON list of pools: name, engine, device, models, modalities, max_lora_rank, cost, precision, quantization, cpu_offload_gb",
    )

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, v: list[PoolConfig]) -> list[PoolConfig]:
        names = [p.name for p in v]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        return v
