"""Per-tenant admission: token buckets with Retry-After, counted slots."""

from __future__ import annotations

from services.gateway.limits import Slots, TenantLimiter


def test_token_bucket_per_tenant_with_burst_and_retry_after() -> None:
    lim = TenantLimiter({"acme": 2.0, "*": 1.0}, burst_s=1.5)
    assert [lim.acquire("acme", now=0.0) for _ in range(3)] == [None, None, None]  # burst: 2 rps x 1.5 s
    wait = lim.acquire("acme", now=0.0)
    assert wait is not None and abs(wait - 0.5) < 1e-9  # the next token in half a second at 2 rps
    assert lim.acquire("acme", now=0.5) is None
    assert lim.acquire("beta", now=0.0) is None and lim.acquire("beta", now=0.0) is not None  # "*"
    assert lim.acquire("acme", now=0.5) is not None and lim.acquire("gamma", now=0.0) is None  # tenants apart
    free = TenantLimiter({})
    assert all(free.acquire("x", now=0.0) is None for _ in range(1000))


def test_slots_bound_and_release() -> None:
    s = Slots(2)
    assert s.take("a") and s.take("a") and not s.take("a") and s.take("b")
    s.give("a")
    assert s.used("a") == 1 and s.take("a")
    s.give("a")
    s.give("a")
    assert s.used("a") == 0
