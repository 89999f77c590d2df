"""Per-tenant admission on the public APIs: a request rate and a token budget, on `limits`.

Both are sliding-window counters of the `limits` library, keyed by tenant. Their storage is
`SY_LIMITS_STORAGE_URI`: `memory://` (the default) counts per replica; `redis://host:6379` counts
in Redis (through redis-py), so every gateway and registry replica shares one budget per tenant.

- rate: `SY_GATEWAY_RATE_LIMITS` requests/s per tenant, over a window of `SY_GATEWAY_RATE_BURST_S`
  (rounded up to whole seconds) — the burst a tenant may send at once;
- tokens: `SY_GATEWAY_TOKEN_BUDGETS` tokens per minute per tenant, each request costing its prompt
  tokens plus the tokens it may generate (max_tokens x n). A request that alone costs more than
  the budget is refused outright: waiting would never let it through.

A refusal is `Refused` (HTTP 429 with Retry-After); the APIs turn it into their error body.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from limits import RateLimitItem, RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.storage import storage_from_string

from shared.config import Settings
from shared.telemetry import get_logger

log = get_logger(__name__)


@dataclass
class Refused(Exception):
    """A tenant over one of its limits: 429 with `retry_after` seconds."""

    message: str
    code: str
    retry_after: int

    def __str__(self) -> str:
        return self.message


def async_storage_uri(uri: str) -> str:
    """`limits` picks its asyncio storage by the `async+` scheme prefix."""
    return uri if uri.startswith("async+") else f"async+{uri}"


def storage(uri: str) -> Any:
    """The asyncio storage for `uri`; Redis through redis-py, which the project already ships
    (limits' own default client, coredis, is not installed)."""
    full = async_storage_uri(uri)
    if full.startswith(("async+redis://", "async+rediss://", "async+redis+sentinel://")):
        return storage_from_string(full, implementation="redispy")
    return storage_from_string(full)


class Admission:
    """Rate and token budget per tenant; tenants with neither configured are never counted."""

    def __init__(self, settings: Settings) -> None:
        self._rates = dict(settings.gateway_rate_limits)
        self._budgets = dict(settings.gateway_token_budgets)
        window = max(1, math.ceil(settings.gateway_rate_burst_s))
        self._rate_items: dict[str, RateLimitItem] = {
            tenant: RateLimitItemPerSecond(max(1, math.floor(rate * window)), window, namespace="sy-rate")
            for tenant, rate in self._rates.items()
        }
        self._budget_items: dict[str, RateLimitItem] = {
            tenant: RateLimitItemPerMinute(budget, 1, namespace="sy-tokens")
            for tenant, budget in self._budgets.items()
        }
        self._limiter = SlidingWindowCounterRateLimiter(storage(settings.limits_storage_uri))

    def _of(self, items: dict[str, RateLimitItem], tenant: str) -> RateLimitItem | None:
        return items.get(tenant, items.get("*"))

    def rate_of(self, tenant: str) -> float | None:
        return self._rates.get(tenant, self._rates.get("*"))

    def budget_of(self, tenant: str) -> int | None:
        return self._budgets.get(tenant, self._budgets.get("*"))

    async def _retry_after(self, item: RateLimitItem, tenant: str) -> int:
        stats = await self._limiter.get_window_stats(item, tenant)
        return max(1, math.ceil(stats.reset_time - time.time()))

    async def request(self, tenant: str) -> None:
        """Count one request; Refused past the tenant's rate."""
        item = self._of(self._rate_items, tenant)
        if item is None or await self._limiter.hit(item, tenant):
            return
        raise Refused(
            f"rate limit of {self.rate_of(tenant):g} requests/s reached for this tenant",
            "rate_limit_exceeded",
            await self._retry_after(item, tenant),
        )

    async def tokens(self, tenant: str, cost: int) -> None:
        """Spend `cost` tokens of the tenant's budget per minute; Refused when it is spent."""
        item = self._of(self._budget_items, tenant)
        if item is None or cost <= 0:
            return
        budget = item.amount
        if cost > budget:
            raise Refused(
                f"this request needs up to {cost} tokens (prompt + max_tokens x n); this tenant's "
                f"budget is {budget} tokens per minute: lower max_tokens or n, or split the request",
                "tokens_exceed_budget",
                60,
            )
        if not await self._limiter.hit(item, tenant, cost=cost):
            raise Refused(
                f"token budget of {budget} tokens per minute spent for this tenant "
                f"(this request needs up to {cost})",
                "token_budget_exceeded",
                await self._retry_after(item, tenant),
            )


def estimate_tokens(text_bytes: int) -> int:
    """Prompt tokens of text not yet tokenized: about 4 bytes a token (budgets only, never billing)."""
    return max(1, math.ceil(text_bytes / 4))
