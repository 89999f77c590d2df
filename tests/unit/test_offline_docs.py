"""/docs and /redoc load with no network: every script and stylesheet they name is served by the
app itself (FastAPI's defaults name a CDN and render blank offline)."""

from __future__ import annotations

import re
import socket

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from shared.runtime.api import rest_app


class Pong(BaseModel):
    ok: bool


def _app() -> TestClient:
    app = rest_app(title="t")

    @app.get("/ping", response_model=Pong)
    async def ping() -> Pong:
        return Pong(ok=True)

    return TestClient(app)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_every_asset_locally(page: str, no_network: None) -> None:
    client = _app()
    html = client.get(page)
    assert html.status_code == 200
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
    scripts = [a for a in assets if a.endswith((".js", ".css"))]
    assert scripts, html.text
    for url in scripts:
        assert url.startswith("/"), f"{page} loads {url} from elsewhere"
        got = client.get(url)
        assert got.status_code == 200 and len(got.content) > 10_000, url
    assert client.get("/openapi.json").json()["paths"]["/ping"]["get"]["responses"]["200"]["content"]
