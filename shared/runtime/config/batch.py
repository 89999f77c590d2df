"""The Batch jobs section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class BatchSettings(Section):
    """/v1/files and /v1/batches, run by services/batch on Celery (issue 9, docs/batches.md)."""

    title: ClassVar[str] = "Batch jobs"

    celery_broker: str | None = Field(
        default=None,
        description="Celery broker URL (redis://host:6379/0); `switchyard up` starts an embedded redis-server "
        "and sets it; unset without one = a SQLite file under <var_dir>/celery",
    )
    batch_file_max_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="Largest batch input file (uploads also obey SY_GATEWAY_MAX_BODY_BYTES)",
    )
    batch_file_max_lines: int = Field(default=50000, ge=1, description="Most lines in a batch input file")
    batch_line_max_bytes: int = Field(
        default=64 * 1024, ge=256, description="Longer input lines go to the error file"
    )
    batch_max_in_flight: int = Field(
        default=64, ge=1, description="Lines of one job sent and not yet answered (backpressure window)"
    )
    batch_rate_per_s: float = Field(
        default=0.0, ge=0, description="Most lines per second one job sends (0: only the window limits)"
    )
    batch_worker_concurrency: int = Field(
        default=4, ge=1, le=64, description="Jobs one Celery worker runs at once"
    )
    batch_lease_s: float = Field(
        default=15.0, gt=0, description="A job whose worker went silent this long is resumed by another"
    )
    batch_sweep_interval_s: float = Field(
        default=2.0, gt=0, description="How often the batch service looks for jobs to (re)start"
    )
    batch_cancel_grace_s: float = Field(
        default=10.0, ge=0, description="How long a cancelled job waits for lines already sent"
    )
