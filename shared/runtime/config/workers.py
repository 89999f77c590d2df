"""The Workers section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class WorkerSettings(Section):
    """What both inference workers (vLLM and Triton) share: heartbeats and stream coalescing."""

    title: ClassVar[str] = "Workers"

    heartbeat_interval_s: float = Field(default=2.0, gt=0, description="How often workers publish heartbeats")
    stream_flush_ms: float = Field(
        default=15.0,
        ge=0,
        description="Workers coalesce stream deltas for this long (the first token goes at once)",
    )
