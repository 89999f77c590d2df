"""The cache's REST API (services/cache/api.py) over a stage without Milvus: the answers before the
cache is up, the auth and validation errors, the floors, and a response schema for every route."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from services.cache.api import cache_app
from services.cache.lookup import Stats
from services.cache.policy import CachePolicy
from services.cache.shadow import Checks
from services.cache.stage import CacheStage
from shared.runtime.config import load_settings
from shared.runtime.storage import open_store

TOKEN = "tok-" + "x" * 40
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class FakeCache:
    """What the API reads of a SemanticCache."""

    def __init__(self) -> None:
        self.policy = CachePolicy(floor=0.9)
        self.stats = Stats()
        self.front: list[object] = []
        self.embedder = SimpleNamespace(batches=3, reused=1)
        self.store = SimpleNamespace(count=lambda: 7)
        self.purged: list[Any] = []
        self.checks = Checks("", 0.0)

    async def purge(self, p: Any, milvus: bool = True) -> int:
        self.purged.append(p)
        return 2


@pytest.fixture
def stage(tmp_path: Path) -> CacheStage:
    settings = load_settings(internal_token=TOKEN, var_dir=tmp_path, s3_endpoint=None)
    return CacheStage(settings, open_store(settings))


def client(stage: CacheStage, announced: list[Any] | None = None) -> httpx.AsyncClient:
    async def announce(ev: Any) -> None:
        (announced if announced is not None else []).append(ev)

    app = cache_app(stage.settings, stage, announce)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c")


async def test_before_the_cache_is_up(stage: CacheStage) -> None:
    async with client(stage) as http:
        assert (await http.get("/v1/cache/stats")).json() == {"ready": False}
        r = await http.delete("/v1/cache/entries?tenant=acme")
        assert r.status_code == 401 and r.json() == {"error": {"message": "invalid token", "type": "auth"}}
        r = await http.delete("/v1/cache/entries?tenant=acme", headers=AUTH)
        assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable"
        r = await http.post("/v1/cache/peek", content=b"", headers=AUTH)
        assert r.status_code == 204 and r.headers["x-cache-reason"] == "not_ready"
        assert (await http.get("/v1/cache/tenants/acme")).status_code == 503


async def test_purge_floors_and_stats(stage: CacheStage) -> None:
    cache = FakeCache()
    stage.cache = cache  # type: ignore[assignment]
    announced: list[Any] = []
    async with client(stage, announced) as http:
        r = await http.delete("/v1/cache/entries", headers=AUTH)
        assert r.status_code == 400 and r.json() == {
            "error": {"message": "name tenant, model, adapter or entry_id"}
        }
        r = await http.delete("/v1/cache/entries?tenant=acme&model=", headers=AUTH)
        assert r.json() == {"error": {"message": "empty value for tenant, model"}}
        r = await http.delete("/v1/cache/entries?tenant=acme", headers=AUTH)
        assert r.json() == {"deleted": 2} and cache.stats.invalidated == 2
        assert cache.purged[0].tenant == "acme" and announced[0].tenant == "acme"

        url = "/v1/cache/tenants/acme"
        assert (await http.put(url, json={"similarity_floor": 0.5})).status_code == 401
        r = await http.put(url, json={"similarity_floor": 1.5}, headers=AUTH)
        assert r.status_code == 400
        assert r.json()["error"] == {
            "message": "similarity_floor: Input should be less than or equal to 1",
            "type": "invalid_request_error",
        }
        r = await http.put(url, json={"similarity_floor": 0.5}, headers=AUTH)
        defaults = {"default": 0.9, "target_error": 0.01, "default_target_error": 0.01}
        assert r.json() == {"tenant": "acme", "similarity_floor": 0.5, **defaults}
        assert (await http.get(url)).json()["similarity_floor"] == 0.5
        # The error budget's target: set on its own (the floor stays), validated, reset by DELETE.
        r = await http.put(url, json={"target_error": 0.05}, headers=AUTH)
        assert r.json()["target_error"] == 0.05 and r.json()["similarity_floor"] == 0.5
        assert cache.policy.target_for("acme") == 0.05 and cache.policy.target_for("other") == 0.01
        for bad in ({"target_error": 0}, {"target_error": 1.0}, {}):
            assert (await http.put(url, json=bad, headers=AUTH)).status_code == 400, bad
        r = await http.delete(url, headers=AUTH)
        assert r.json() == {"tenant": "acme", "similarity_floor": 0.9, **defaults}

        s = (await http.get("/v1/cache/stats")).json()
        assert s["ready"] and s["entries"] == 7 and s["front_entries"] == 0
        assert s["embeddings"] == {"batches": 3, "reused": 1}
        assert s["lookup_ms"] == {"p50": None, "p99": None, "window": 0}
        assert s["invalidated"] == 2 and set(s["hit_rate"]) == {"exact", "semantic", "all"}
        assert s["checks"]["shadows"] == 0 and s["checks"]["tenants"] == {}


async def test_every_route_lists_a_response_schema(stage: CacheStage) -> None:
    async with client(stage) as http:
        spec = (await http.get("/openapi.json")).json()
    ops = [(path, method, op) for path, item in spec["paths"].items() for method, op in item.items()]
    assert len(ops) == 6
    for path, method, op in ops:
        ok = op["responses"].get("200", {})
        assert any("schema" in c for c in ok.get("content", {}).values()), (path, method)
