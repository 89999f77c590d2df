"""The Stage rules section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class StageSettings(Section):
    """How every stage consumer treats records (DESIGN.md §3, docs/stage-rules.md): size bound, retries, dead letters, drain and readiness."""

    title: ClassVar[str] = "Stage rules"

    max_record_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Larger records go to the DLQ (media travels by claim check)",
    )
    stage_max_in_flight: int = Field(
        default=64, ge=1, le=100000, description="Records one consumer handles at once"
    )
    stage_max_attempts: int = Field(default=3, ge=1, le=100, description="Handler attempts before the DLQ")
    stage_retry_backoff_ms: int = Field(
        default=100, ge=0, description="First retry backoff (exponential, jittered)"
    )
    stage_retry_backoff_max_ms: int = Field(default=5000, ge=0, description="Longest retry backoff")
    drain_timeout_s: float = Field(
        default=20.0, ge=0, description="How long SIGTERM waits for in-flight records"
    )
    dlq_max_original_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="Excerpt of the input kept in a DLQ record (its size and sha256 always); never above SY_MAX_RECORD_BYTES",
    )
    stage_handler_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="One handler attempt longer than this fails (retried, then dead-lettered)",
    )
    stage_max_deliveries: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Deliveries of a record that kill the process (crash, OOM, SIGKILL) before it is dead-lettered",
    )
    state_dir: Path | None = Field(
        default=None,
        description="Where delivery counts survive a restart (default: <var_dir>/state; a volume in Kubernetes)",
    )
    stall_after_s: float = Field(
        default=60.0,
        gt=0,
        description="/readyz turns false when records wait and none finished for this long, or the producer cannot deliver",
    )
