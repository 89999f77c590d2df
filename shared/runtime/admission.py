"""Per-tenant admission on the public APIs: a request rate and a token budget, on `limits`.

Both are sliding-window counters of the `limits` library, keyed by tenant. Their storage is
`SY_LIMITS_STORAGE_URI`: `memory://` (the default) counts per replica; `redis://host:6379` counts
in Redis (through redis-py), so every gateway and registry replica shares one budget per tenant.

- rate: `SY_GATEWAY_RATE_LIMITS` requests/s per tenant, counted over a window of
  `SY_GATEWAY_RATE_BURST_S` seconds (whole seconds, and long enough to hold one request at a
  fractional rate: 0.1/s is 1 request per 10 s) — the burst a tenant may send at once;
- tokens: `SY_GATEWAY_TOKEN_BUDGETS` tokens per minute per tenant, each request costing its prompt
  tokens plus the tokens it may generate (max_tokens x n). A request that alone costs more than
  the budget is refused outright with 400: waiting would never let it through.

A refusal is `Refused` (429 with Retry-After, or that 400); the APIs turn it into their error body.
When the storage is unreachable (Redis down) requests are admitted, with a warning and
`sy_admission_storage_errors_total`: an outage of the counters never takes the API down.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from limits import RateLimitItem, RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.errors import StorageError
from limits.storage import storage_from_string
from prometheus_client import Counter

from shared.runtime.config import Settings
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

STORAGE_ERRORS = Counter(
    "sy_admission_storage_errors_total", "Admission checks let through because the limits storage failed"
)
REDIS_TIMEOUT_S = 0.5  # a Redis that hangs must not hang every request


@dataclass
class Refused(Exception):
    """A tenant over one of its limits: 429 with `retry_after` seconds (None with a 400: a request
    that can never pass)."""

    message: str
    code: str
    retry_after: int | None
    status: int = 429

    def __str__(self) -> str:
        return self.message


def async_storage_uri(uri: str) -> str:
    """`limits` picks its asyncio storage by the `async+` scheme prefix."""
    return uri if uri.startswith("async+") else f"async+{uri}"


def storage(uri: str) -> Any:
    """The asyncio storage for `uri`; Redis through redis-py, which the project already ships
    (limits' own default client, coredis, is not installed)."""
    full = async_storage_uri(uri)
    if full.startswith(
        ("async+redis://", "async+rediss://", "async+redis+sentinel://", "async+redis+cluster://")
    ):
        return storage_from_string(
            full,
            implementation="redispy",
            wrap_exceptions=True,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
        )
    return storage_from_string(full, wrap_exceptions=True)


def rate_item(rate: float, burst_s: float) -> RateLimitItem:
    """`rate` requests/s over a whole-second window of at least `burst_s`, long enough that the
    window holds one request (a fractional rate stays what it says)."""
    window = max(1, math.ceil(burst_s), math.ceil(1 / rate - 1e-9))
    return RateLimitItemPerSecond(max(1, round(rate * window)), window, namespace="sy-rate")


class Admission:
    """Rate and token budget per tenant; tenants with neither configured are never counted."""

    def __init__(self, settings: Settings) -> None:
        self._rates = dict(settings.gateway_rate_limits)
        self._budgets = dict(settings.gateway_token_budgets)
        self._rate_items: dict[str, RateLimitItem] = {
            tenant: rate_item(rate, settings.gateway_rate_burst_s) for tenant, rate in self._rates.items()
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

    async def _hit(self, item: RateLimitItem, tenant: str, cost: int = 1) -> bool:
        """Count `cost` against the item; True (admitted) when the storage cannot be reached."""
        try:
            return await self._limiter.hit(item, tenant, cost=cost)
        except StorageError as exc:
            STORAGE_ERRORS.inc()
            log.warning("limits storage unavailable; admitting", error=repr(exc.storage_error))
            return True

    async def _retry_after(self, item: RateLimitItem, tenant: str) -> int:
        try:
            stats = await self._limiter.get_window_stats(item, tenant)
        except StorageError:
            return 1
        return max(1, math.ceil(stats.reset_time - time.time()))

    async def request(self, tenant: str) -> None:
        """Count one request; Refused past the tenant's rate."""
        item = self._of(self._rate_items, tenant)
        if item is None or await self._hit(item, tenant):
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
                None,
                400,
            )
        if not await self._hit(item, tenant, cost):
            # The sliding window frees the budget gradually: about cost/budget of a minute for
            # this request to fit (a single freed token would say 1 s and invite a tight loop).
            raise Refused(
                f"token budget of {budget} tokens per minute spent for this tenant "
                f"(this request needs up to {cost})",
                "token_budget_exceeded",
                max(await self._retry_after(item, tenant), min(60, math.ceil(60 * cost / budget))),
            )


def estimate_tokens(text_bytes: int) -> int:
    """Prompt tokens of text not yet tokenized: about 4 bytes a token (budgets only, never billing)."""
    return max(1, math.ceil(text_bytes / 4))
