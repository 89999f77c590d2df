"""Admin surfaces (metrics, API docs, cache stats and floors, profiling) need the internal token
where SY_ADMIN_AUTH requires it (production by default); the probes and the public API do not."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import Mount

from shared.runtime.admin import AdminGuard, is_admin_path
from shared.runtime.config import load_settings
from shared.runtime.health import Health, health_app

TOKEN = "tok-" + "x" * 40


def _app(admin_auth: str) -> AdminGuard:
    settings = load_settings(admin_auth=admin_auth, internal_token=TOKEN)
    health = Health("t")
    health.built = True
    api = FastAPI()

    @api.get("/v1/models")
    async def models() -> dict[str, str]:
        return {"object": "list"}

    @api.get("/v1/cache/stats")
    async def stats() -> dict[str, int]:
        return {"entries": 1}

    root = health_app(health)
    root.router.routes.append(Mount("/", app=api))
    return AdminGuard(root, settings)


async def _get(app: AdminGuard, path: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as http:
        return (await http.get(path, headers=headers)).status_code


ADMIN = ["/metrics", "/docs", "/openapi.json", "/redoc", "/v1/cache/stats"]


async def test_required_admin_paths_need_the_internal_token() -> None:
    app = _app("required")
    for path in ADMIN:
        assert await _get(app, path) == 401, path
        assert await _get(app, path, "sk-a-tenant-key") == 401, path
        assert await _get(app, path, TOKEN) in (200, 404), path  # 404: a route this test app lacks
    assert await _get(app, "/metrics", TOKEN) == 200
    for open_path in ("/healthz", "/readyz", "/v1/models"):
        assert await _get(app, open_path) == 200, open_path


async def test_off_leaves_them_open_and_auto_follows_production() -> None:
    assert await _get(_app("off"), "/metrics") == 200
    assert not load_settings(admin_auth="auto", env="dev").admin_auth_required
    assert load_settings(admin_auth="auto", env="production").admin_auth_required


@pytest.mark.parametrize(
    ("path", "admin"),
    [
        ("/metrics", True),
        ("/docs/oauth2-redirect", True),
        ("/v1/cache/tenants/acme", True),
        ("/v1/profile/start", True),
        ("/v1/chat/completions", False),
        ("/metricsx", False),
        ("/readyz", False),
    ],
)
def test_which_paths_are_admin(path: str, admin: bool) -> None:
    assert is_admin_path(path) is admin
