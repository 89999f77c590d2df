"""Slots held by open connections of one gateway replica (the API turns refusals into 429/503).

- concurrent streams per tenant: a slow SSE reader holds one slot, never worker capacity;
- requests in flight in this replica: past the bound the gateway answers 503 instead of queueing
  without limit in front of a saturated pool;
- request bodies (`body_limit`, around the whole app): 413 past SY_GATEWAY_MAX_BODY_BYTES.
Rates and token budgets are counted in shared/runtime/admission.py (the `limits` library, optionally in
Redis so replicas share them); these slots are this process's own connections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.types import ASGIApp

from shared.openai.errors import error_response
from shared.runtime.body_limit import BodyLimit

from .errors import ApiError


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


def body_limit(app: ASGIApp, limit: int) -> BodyLimit:
    """413 `body_too_large` past `limit` bytes, declared or received."""
    message = f"request body exceeds {limit} bytes"
    return BodyLimit(
        app,
        limit,
        refusal=lambda: error_response("gateway", 413, message, "body_too_large"),
        overflow=lambda: ApiError(413, message, "body_too_large"),
    )
