"""The Router section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class RouterSettings(Section):
    """How the router picks a pool and a worker, and how long it holds what it cannot place."""

    title: ClassVar[str] = "Router"

    router_adapter_affinity: bool = Field(
        default=True,
        description="Key sy.infer.* by model:adapter and prefer workers holding the adapter (off: spread by request)",
    )
    router_stale_after_s: float | None = Field(
        default=None,
        gt=0,
        description="Heartbeat age after which a worker (and a pool with no fresher one) is out (default: 3 heartbeats)",
    )
    router_park_max_s: float = Field(
        default=600.0,
        ge=0,
        description="Requests without a deadline wait on a down pool silent this long (its topic keeps them); longer = 503 no_pool",
    )
    router_pending_max: int = Field(
        default=100000, ge=100, description="Routed-but-unanswered requests the router tracks for fail-over"
    )
