"""Admin surfaces behind the internal token: metrics, API docs, cache stats and floors, profiling.

Every service serves its API and these on one port. Where `SY_ADMIN_AUTH` requires it (`auto`:
in production mode), a request for an admin path must carry `Authorization: Bearer
<SY_INTERNAL_TOKEN>`; anything else gets 401. /healthz and /readyz stay open for the probes, and
so do the Swagger UI and ReDoc scripts under /static-offline-docs/ (the same files as the
fastapi-offline wheel's: a browser fetches them without the token, and they hold no data).
Prometheus sends the token with `authorization: {credentials_file: ...}` (deploy/prometheus.yml).
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from shared.runtime.auth import is_internal
from shared.runtime.config import Settings

# Exact paths, and prefixes (ending in "/").
ADMIN_PATHS = frozenset({"/metrics", "/docs", "/redoc", "/openapi.json", "/v1/cache/stats"})
ADMIN_PREFIXES = ("/docs/", "/v1/cache/tenants/", "/v1/profile/")


def is_admin_path(path: str) -> bool:
    return path in ADMIN_PATHS or path.startswith(ADMIN_PREFIXES)


class AdminGuard:
    """401 for an admin path without the internal token (when required); the rest passes."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and self.settings.admin_auth_required
            and is_admin_path(scope.get("path", ""))
        ):
            headers = dict(scope.get("headers") or [])
            auth = headers.get(b"authorization")
            if not is_internal(self.settings, auth.decode("latin-1") if auth is not None else None):
                body = {
                    "error": {
                        "message": "admin endpoint: send 'Authorization: Bearer <SY_INTERNAL_TOKEN>'",
                        "type": "authentication_error",
                        "code": "admin_token_required",
                    }
                }
                await JSONResponse(body, 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def admin_headers(settings: Settings) -> dict[str, str]:
    """What the launcher and the profiler send to read admin paths of the services."""
    return {"Authorization": f"Bearer {settings.internal_token.get_secret_value()}"}
