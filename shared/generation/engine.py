"""What an engine must provide to run behind a `GenerationWorker` (shared/generation/worker.py).

The worker does what every pool does the same way (consume sy.infer.<pool>, refuse late
requests, stream deltas, publish the final response, heartbeat); an engine says how one request
is made ready and generated, which models it serves, and its live load. vLLM in-process
(services/vllm_worker) and Triton over gRPC (services/triton_worker) are the two today.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.types import ASGIApp

from shared.runtime.envelope import Envelope

# A task the service runs beside its consumer until the stop event (shared/runtime/service.py).
Background = Callable[[asyncio.Event], Awaitable[None]]


@dataclass
class Job:
    """One request made ready for its engine.

    `kw` is the shared sampling (shared/generation/engine_io.sampling_kwargs: n and logprobs size
    the Accumulator); `inputs` is whatever else the engine's `generate` takes; `release` runs
    once generation has ended, whatever the outcome (e.g. unpin a LoRA adapter).
    """

    kw: dict[str, Any]
    inputs: Any = None
    release: Callable[[], None] | None = None


@dataclass
class EngineLoad:
    """An engine's part of a heartbeat; the worker adds pool, in-flight and partitions."""

    models: list[str]
    model_versions: dict[str, str]
    queue_depth: int
    modalities: list[str]
    kv_usage: float = 0.0
    max_lora_rank: int = 0
    adapters: list[str] = field(default_factory=list)


class GenerationEngine(Protocol):
    """An inference engine as a GenerationWorker drives it."""

    stage: str  # the worker's stage name: consumer, error replies, timings' parent
    engine: str  # the heartbeat's engine name ("vllm", "triton")
    pool: str  # the pool it serves: consumes sy.infer.<pool>
    max_in_flight: int  # requests generated at once (consumer bound and heartbeat)
    health_check: str  # the name of its readiness check

    async def start(self) -> None:
        """Start (or reach) the engine and load what the first request needs."""
        ...

    async def stop(self) -> None: ...

    @property
    def ready(self) -> bool:
        """Whether the engine can serve now (readiness, and heartbeats for some)."""
        ...

    async def prepare(self, env: Envelope) -> Job:
        """Engine inputs for `env`, or Rejected: a request this engine cannot serve."""
        ...

    def generate(self, env: Envelope, job: Job, attempt: str) -> AsyncIterator[Any]:
        """The generation's DELTA steps (vLLM RequestOutput or engine_io.EngineStep);
        `attempt` is unique per delivery of the request."""
        ...

    def model_version(self, model: str) -> str:
        """The weights fingerprint of `model`, for the response ("" when unknown)."""
        ...

    def load(self) -> EngineLoad:
        """The live state for a heartbeat; raises to skip the beat (engine unreachable)."""
        ...

    async def refresh(self) -> None:
        """Runs before each heartbeat; a failure only skips the refresh."""
        ...

    def background(self) -> list[Background]:
        """The engine's own background tasks (watchdogs, event followers)."""
        ...

    def app(self) -> ASGIApp | None:
        """REST routes served beside /metrics and /readyz, if any."""
        ...
