"""Slots held by open connections of one gateway replica (the API turns refusals into 429/503).

- concurrent streams per tenant: a slow SSE reader holds one slot, never worker capacity;
- requests in flight in this replica: past the bound the gateway answers 503 instead of queueing
  without limit in front of a saturated pool;
- request bodies (`BodyLimit`, around the whole app): 413 past SY_GATEWAY_MAX_BODY_BYTES.
Rates and token budgets are counted in shared/runtime/admission.py (the `limits` library, optionally in
Redis so replicas share them); these slots are this process's own connections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.openai.errors import error_response

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


class BodyLimit:
    """413 for bodies over the limit, whether or not the client sent Content-Length."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await error_response(
                "gateway", 413, f"request body exceeds {self.limit} bytes", "body_too_large"
            )(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise ApiError(413, f"request body exceeds {self.limit} bytes", "body_too_large")
            return msg

        await self.app(scope, limited, send)
