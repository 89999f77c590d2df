"""A request-body limit as ASGI middleware, for the gateway and the registry alike."""

from __future__ import annotations

from collections.abc import Callable, Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """413 for a body over `limit` bytes: by Content-Length before reading anything, and while the
    body arrives (a client may send no length), so an oversize body is never fully received.

    `refusal` answers a declared oversize body; `overflow` is raised into the app when the bytes
    received pass the limit (the app's error handler answers it). `methods`: only these are limited.
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        *,
        refusal: Callable[[], ASGIApp],
        overflow: Callable[[], Exception],
        methods: Collection[str] | None = None,
    ) -> None:
        self.app, self.limit = app, limit
        self.refusal, self.overflow, self.methods = refusal, overflow, methods

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.methods is not None and scope["method"] not in self.methods):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self.refusal()(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise self.overflow()
            return msg

        await self.app(scope, limited, send)
