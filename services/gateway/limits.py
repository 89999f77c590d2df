"""Per-tenant admission limits of one gateway replica (pure; the API turns refusals into 429/503).

- request rate: a token bucket per tenant (`rate` requests/s, holding at most `burst_s` seconds of
  it), refusals say when the next request would pass (Retry-After);
- concurrent streams per tenant: a slow SSE reader holds one slot, never worker capacity;
- requests in flight in this replica: past the bound the gateway answers 503 instead of queueing
  without limit in front of a saturated pool.
Limits are per replica: N replicas admit up to N times the rate (README says so).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class TenantLimiter:
    rates: dict[str, float]  # tenant -> requests/s; "*" applies to tenants not named; none = unlimited
    burst_s: float = 2.0
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def rate_of(self, tenant: str) -> float | None:
        return self.rates.get(tenant, self.rates.get("*"))

    def acquire(self, tenant: str, now: float | None = None) -> float | None:
        """None when the request may go; else the seconds until it would (Retry-After)."""
        rate = self.rate_of(tenant)
        if rate is None:
            return None
        t = time.monotonic() if now is None else now
        cap = max(1.0, rate * self.burst_s)
        b = self._buckets.setdefault(tenant, _Bucket(cap, t))
        b.tokens = min(cap, b.tokens + (t - b.at) * rate)
        b.at = t
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return None
        return (1.0 - b.tokens) / rate if rate > 0 else math.inf


@dataclass
class Slots:
    """Counted slots per key with a bound (concurrent streams per tenant, in-flight requests)."""

    limit: int
    _used: dict[str, int] = field(default_factory=dict)

    def take(self, key: str) -> bool:
        n = self._used.get(key, 0)
        if n >= self.limit:
            return False
        self._used[key] = n + 1
        return True

    def give(self, key: str) -> None:
        n = self._used.get(key, 0) - 1
        if n > 0:
            self._used[key] = n
        else:
            self._used.pop(key, None)

    def used(self, key: str) -> int:
        return self._used.get(key, 0)
