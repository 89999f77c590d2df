"""The Triton worker section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class TritonSettings(Section):
    """The Triton pool's worker and the server it drives."""

    title: ClassVar[str] = "Triton worker"

    triton_url: str | None = Field(
        default=None,
        description="Triton gRPC address host:port; unset = the launcher starts the embedded tritonserver",
    )
    triton_metrics_url: str | None = Field(
        default=None,
        description="Triton Prometheus URL the worker scrapes (default: http://<triton host>:8002/metrics)",
    )
    triton_pool: str = Field(
        default="triton", description="Pool this Triton worker serves (topic infer.<pool>)"
    )
    triton_max_in_flight: int = Field(
        default=32, ge=1, description="Requests one Triton worker has in flight at once"
    )
    triton_timeout_s: float = Field(default=300.0, gt=0, description="Bound on one Triton generation")
