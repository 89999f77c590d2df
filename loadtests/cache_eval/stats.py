"""Rates with Wilson score intervals: a few hundred pairs per kind give wide intervals, and a
rate without one reads as more certain than it is (0 false hits in 80 pairs is up to 4.6%)."""

from __future__ import annotations

from services.cache.budget import Z95
from services.cache.budget import wilson as _wilson


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval (lower, upper) for k successes in n trials; (0, 1) when n is 0. The
    formula is the cache's own (budget.py), which judges its thresholds with it."""
    if n and not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    _, lo, hi = _wilson(k, n, z)
    return lo, hi


def rate(k: int, n: int) -> dict[str, object]:
    """k of n as a JSON-ready dict: count, rate and its Wilson 95% interval."""
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": round(k / n, 4) if n else None, "ci95": [round(lo, 4), round(hi, 4)]}


def fmt(r: dict[str, object]) -> str:
    """'52.0% [47.5, 56.4] (248/477)' for tables."""
    lo, hi = r["ci95"]  # type: ignore[misc]
    value = "  n/a" if r["rate"] is None else f"{100 * float(r['rate']):5.1f}%"  # type: ignore[arg-type]
    return f"{value} [{100 * lo:5.1f}, {100 * hi:5.1f}] ({r['k']}/{r['n']})"
