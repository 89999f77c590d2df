"""The Tenant limits section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, PositiveInt

from shared.runtime.config.base import Section


class TenantLimitsSettings(Section):
    """Rates, token budgets and quotas per tenant, enforced by the gateway and the registry."""

    title: ClassVar[str] = "Tenant limits"

    gateway_rate_limits: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict,
        description='JSON map tenant -> requests/s on the gateway and the registry ("*": every other '
        "tenant; each rate > 0: remove a tenant's key to shut it out); unset = no limit",
    )
    gateway_rate_burst_s: float = Field(
        default=2.0,
        gt=0,
        le=3600,
        description="The rate is counted over this many seconds (rounded up): the burst a tenant may send",
    )
    gateway_token_budgets: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description='JSON map tenant -> tokens per minute ("*": every other tenant): each chat, completion, '
        "async request and rollout spends its prompt tokens + max_tokens x n; 429 once spent",
    )
    limits_storage_uri: str = Field(
        default="memory://",
        description="Where rates and token budgets are counted (the `limits` library): memory:// per "
        "replica, or redis://host:6379 shared by every replica",
    )
    tenant_max_queued: int = Field(
        default=1000,
        ge=1,
        description="Async requests a tenant may have queued (unanswered) at once (429 past it)",
    )
    tenant_max_rollouts: int = Field(
        default=64,
        ge=1,
        description="Rollouts a tenant may have unfinished at once, over all replicas sharing SY_GATEWAY_STATE_URL (429 past it)",
    )
    rollout_quota_window_s: float = Field(
        default=3600.0,
        gt=0,
        description="Unfinished rollouts count against SY_TENANT_MAX_ROLLOUTS for this long after acceptance",
    )
    tenant_max_batches: int = Field(
        default=16, ge=1, description="Batches a tenant may have unfinished at once (429 past it)"
    )
    tenant_max_files: int = Field(default=1000, ge=1, description="Files a tenant may keep (429 past it)")
    tenant_max_adapters: int = Field(
        default=200, ge=1, description="Adapters a tenant may own in the registry (429 past it)"
    )
    gateway_max_streams_per_tenant: int = Field(
        default=64,
        ge=1,
        description="Concurrent streaming responses per tenant, over all replicas sharing SY_GATEWAY_STATE_URL (429 past it)",
    )
