"""The registry app over a LocalStore: uploads, reads, aliases, deletes, isolation, events, client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from safetensors.numpy import save
from switchyard.v1.events_pb2 import AdapterEvent

from services.registry.api import create_app
from services.registry.catalog import Catalog
from shared.adapters.registry_client import ChecksumMismatch, Manifest, RegistryClient, RegistryError
from shared.runtime.config import Settings, load_settings
from shared.runtime.storage import LocalStore
from tests.helpers.adapters import (
    adapter_config,
    adapter_tensors,
    make_adapter,
    pickle_bytes,
    safetensors_with_header,
    sha256,
    tensor_name,
    write_base_model,
)

A, B = {"Authorization": "Bearer sk-a"}, {"Authorization": "Bearer sk-b"}
MAX = 64 * 1024


class Env:
    def __init__(self, tmp_path: Path) -> None:
        write_base_model(tmp_path / "models")
        self.settings: Settings = load_settings(
            models_dir=tmp_path / "models",
            storage_dir=tmp_path / "objects",
            api_keys={"sk-a": "acme", "sk-b": "beta"},
            adapter_max_bytes=MAX,
            registry_url="http://registry",
            internal_token="tok-internal",
        )
        self.store = LocalStore(self.settings.object_dir)
        self.events: list[AdapterEvent] = []

    async def start(self) -> httpx.AsyncClient:
        async def publish(ev: AdapterEvent) -> None:
            self.events.append(AdapterEvent.FromString(ev.SerializeToString()))

        self.catalog = Catalog(self.store, publish)
        await self.catalog.load()
        self.transport = httpx.ASGITransport(app=create_app(self.settings, self.catalog))
        return httpx.AsyncClient(transport=self.transport, base_url="http://registry")

    async def keys(self) -> list[str]:
        return [i.key for i in await self.store.list("")]


@pytest.fixture
async def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.fixture
async def http(env: Env) -> AsyncIterator[httpx.AsyncClient]:
    async with await env.start() as c:
        yield c


async def upload(
    http: httpx.AsyncClient,
    name: str = "ad",
    model: bytes | None = None,
    config: bytes | None = None,
    headers: dict[str, str] = A,
    filename: str = "adapter_model.safetensors",
    **fields: str,
) -> httpx.Response:
    m, c = make_adapter()
    files = {
        "adapter_model": (filename, model if model is not None else m, "application/octet-stream"),
        "adapter_config": ("adapter_config.json", config if config is not None else c, "application/json"),
    }
    return await http.post("/v1/adapters", data={"name": name, **fields}, files=files, headers=headers)


def err(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert set(body["error"]) == {"message", "type", "code", "param"}, body
    return body["error"]


# ------------------------------------------------------------------------------------- happy path


async def test_upload_list_get_resolve_download(http: httpx.AsyncClient, env: Env) -> None:
    model, config = make_adapter()
    r = await upload(http, model=model, config=config)
    assert r.status_code == 201, r.text
    m = Manifest.model_validate(r.json())
    assert (m.name, m.version, m.owner, m.visibility) == ("ad", 1, "acme", "private")
    assert m.sha256 == sha256(model) and m.size_bytes == len(model) and m.config_sha256 == sha256(config)
    assert (m.rank, m.alpha, m.target_modules, m.base_model) == (8, 16.0, ["q_proj", "v_proj"], "sy-tiny")
    assert m.aliases == ["latest"] and m.created_unix_ns > 0
    assert await env.keys() == [
        "adapters/ad/state.json",
        "adapters/ad/v1/adapter_config.json",
        "adapters/ad/v1/adapter_model.safetensors",
        "adapters/ad/v1/manifest.json",
    ]

    r2 = await upload(http, model=make_adapter(seed=1)[0], aliases="prod, canary", visibility="public")
    assert r2.status_code == 201 and r2.json()["version"] == 2
    assert sorted(r2.json()["aliases"]) == ["canary", "latest", "prod"]

    listed = (await http.get("/v1/adapters", headers=A)).json()["data"]
    assert [a["name"] for a in listed] == ["ad"]
    assert listed[0]["aliases"] == {"canary": 2, "latest": 2, "prod": 2}
    assert [v["version"] for v in listed[0]["versions"]] == [1, 2]
    assert listed[0]["visibility"] == "public" and listed[0]["owner"] == "acme"

    one = (await http.get("/v1/adapters/ad", headers=A)).json()
    assert one == listed[0]
    v1 = (await http.get("/v1/adapters/ad/versions/1", headers=A)).json()
    assert v1["version"] == 1 and v1["aliases"] == [] and v1["sha256"] == m.sha256

    for ref, want in (("ad", 2), ("ad@1", 1), ("ad@prod", 2), ("ad@latest", 2)):
        r = await http.get("/v1/resolve", params={"ref": ref}, headers=A)
        assert r.status_code == 200 and r.json()["version"] == want, (ref, r.text)
    assert (await http.get("/v1/resolve", params={"ref": "ad@9"}, headers=A)).status_code == 404
    assert (await http.get("/v1/resolve", params={"ref": "ad@nope"}, headers=A)).status_code == 404
    assert (await http.get("/v1/resolve", params={"ref": "../x"}, headers=A)).status_code == 400

    d = await http.get("/v1/adapters/ad/versions/1/files/adapter_model.safetensors", headers=A)
    assert d.status_code == 200 and d.content == model and d.headers["x-sha256"] == sha256(model)
    d = await http.get("/v1/adapters/ad/versions/1/files/adapter_config.json", headers=A)
    assert d.content == config and d.headers["x-sha256"] == sha256(config)
    bad = await http.get("/v1/adapters/ad/versions/1/files/state.json", headers=A)
    assert bad.status_code == 404


async def test_alias_move_and_delete(http: httpx.AsyncClient, env: Env) -> None:
    await upload(http)
    await upload(http, model=make_adapter(seed=1)[0])
    r = await http.put("/v1/adapters/ad/aliases/prod", json={"version": 1}, headers=A)
    assert r.status_code == 200 and r.json()["aliases"] == ["prod"]
    r = await http.put("/v1/adapters/ad/aliases/prod", json={"version": 2}, headers=A)
    assert sorted(r.json()["aliases"]) == ["latest", "prod"]
    assert (await http.put("/v1/adapters/ad/aliases/prod", json={"version": 7}, headers=A)).status_code == 404
    r = await http.put("/v1/adapters/ad/aliases/latest", json={"version": 1}, headers=A)
    assert r.status_code == 400 and "latest" in err(r)["message"]
    r = await http.put("/v1/adapters/ad/aliases/prod", json={"version": "x"}, headers=A)
    assert r.status_code == 400
    r = await http.put("/v1/adapters/ad/aliases/9bad", json={"version": 1}, headers=A)
    assert r.status_code == 400
    assert (await http.delete("/v1/adapters/ad/aliases/latest", headers=A)).status_code == 400
    assert (await http.delete("/v1/adapters/ad/aliases/prod", headers=A)).status_code == 204
    assert (await http.delete("/v1/adapters/ad/aliases/prod", headers=A)).status_code == 404
    assert (await http.get("/v1/adapters/ad", headers=A)).json()["aliases"] == {"latest": 2}


async def test_delete_versions_and_adapter(http: httpx.AsyncClient, env: Env) -> None:
    for seed in range(3):
        assert (await upload(http, model=make_adapter(seed=seed)[0])).status_code == 201
    await http.put("/v1/adapters/ad/aliases/prod", json={"version": 2}, headers=A)
    r = await http.delete("/v1/adapters/ad/versions/2", headers=A)
    assert r.status_code == 409 and "'prod'" in err(r)["message"]
    assert (await http.delete("/v1/adapters/ad/versions/3", headers=A)).status_code == 204  # latest
    a = (await http.get("/v1/adapters/ad", headers=A)).json()
    assert a["aliases"] == {"latest": 2, "prod": 2} and [v["version"] for v in a["versions"]] == [1, 2]
    assert not any("/v3/" in k for k in await env.keys())
    assert (await http.delete("/v1/adapters/ad/versions/3", headers=A)).status_code == 404
    # Numbers are never reused, even after deletes.
    assert (await upload(http)).json()["version"] == 4
    assert (await http.delete("/v1/adapters/ad", headers=A)).status_code == 204
    assert (await http.get("/v1/adapters/ad", headers=A)).status_code == 404
    assert (await http.get("/v1/adapters", headers=A)).json()["data"] == []
    assert await env.keys() == ["adapters/ad/state.json"]  # tombstone keeps next_version
    assert (await upload(http, headers=B)).json()["version"] == 5  # name free again, numbering goes on


# ------------------------------------------------------------------------------------- refusals


def big_adapter() -> tuple[bytes, bytes]:
    mods = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj")
    return save(adapter_tensors(modules=mods)), adapter_config(modules=mods)


def shape_mismatch() -> bytes:
    t = adapter_tensors()
    t[tensor_name(0, "q_proj", "A")] = np.zeros((8, 64), dtype=np.float32)
    return save(t)


BAD_UPLOADS = {
    "pickle": (dict(model=pickle_bytes()), 400, "pickle"),
    "pt filename": (dict(filename="adapter.pt"), 400, "only safetensors"),
    "shape mismatch": (dict(model=shape_mismatch()), 422, "shape mismatch: base_model.model.model.layers.0"),
    "rank too high": (
        dict(
            model=make_adapter(r=16, modules=("q_proj",))[0], config=adapter_config(r=16, modules=("q_proj",))
        ),
        422,
        "rank r=16",
    ),
    "oversize": (dict(model=big_adapter()[0], config=big_adapter()[1]), 413, "over the limit"),
    "oversize stream": (dict(model=b"\0" * (MAX + 3 * 1024 * 1024)), 413, "upload exceeds"),
    "traversal name": (dict(name="../evil"), 400, "invalid adapter name"),
    "slash name": (dict(name="a/b"), 400, "invalid adapter name"),
    "at name": (dict(name="a@b"), 400, "invalid adapter name"),
    "corrupt header": (dict(model=safetensors_with_header(b"{garbage")), 400, "corrupt safetensors header"),
    "wrong base model": (dict(config=adapter_config(base="other-model")), 422, "base model 'other-model'"),
    "bad config": (dict(config=b"{}"), 422, "peft_type"),
    "bad visibility": (dict(visibility="everyone"), 400, "visibility"),
    "bad alias": (dict(aliases="ok,../x"), 400, "invalid alias"),
}


@pytest.mark.parametrize("case", list(BAD_UPLOADS))
async def test_bad_upload_refused_and_nothing_stored(http: httpx.AsyncClient, env: Env, case: str) -> None:
    kw, status, why = BAD_UPLOADS[case]
    r = await upload(http, **kw)  # type: ignore[arg-type]
    assert r.status_code == status, r.text
    assert why in err(r)["message"], err(r)
    assert await env.keys() == []
    assert env.events == []
    assert (await http.get("/v1/adapters", headers=A)).json()["data"] == []


async def test_missing_files(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/adapters", data={"name": "x"}, files={"other": ("f", b"1")}, headers=A)
    assert r.status_code == 400 and err(r)["param"] == "adapter_model"


async def test_name_taken_by_other_tenant(http: httpx.AsyncClient, env: Env) -> None:
    await upload(http)
    r = await upload(http, headers=B)
    assert r.status_code == 409 and err(r)["message"] == "adapter name not available"
    assert [k for k in await env.keys() if "/v2/" in k] == []


# ------------------------------------------------------------------------------------- restart


async def test_restart_rebuilds_and_cleans_leftovers(env: Env) -> None:
    async with await env.start() as http:
        await upload(http)
        await upload(http, model=make_adapter(seed=1)[0], aliases="prod")
    # An upload killed before its manifest: files of v3 without manifest.json.
    model, config = make_adapter(seed=2)
    await env.store.put("adapters/ad/v3/adapter_model.safetensors", model)
    await env.store.put("adapters/ad/v3/adapter_config.json", config)
    await env.store.put("adapters/half/v1/adapter_model.safetensors", model)
    env.events.clear()
    async with await env.start() as http:
        assert not any("/v3/" in k or "/half/" in k for k in await env.keys())
        a = (await http.get("/v1/adapters/ad", headers=A)).json()
        assert [v["version"] for v in a["versions"]] == [1, 2] and a["aliases"] == {"latest": 2, "prod": 2}
        assert (await upload(http)).json()["version"] == 3


async def test_startup_resync_event(env: Env) -> None:
    async with await env.start() as http:
        await upload(http)
    env.events.clear()
    async with await env.start():
        assert await env.catalog.flush_unsent() == 1
    assert [(e.type, e.name, [v.version for v in e.versions]) for e in env.events] == [
        (AdapterEvent.TYPE_UNSPECIFIED, "ad", [1])
    ]


# ------------------------------------------------------------------------------------- tenants


async def test_tenant_isolation(http: httpx.AsyncClient, env: Env) -> None:
    await upload(http, name="secret")
    await upload(http, name="shared", visibility="public")
    assert [a["name"] for a in (await http.get("/v1/adapters", headers=B)).json()["data"]] == ["shared"]
    urls = [
        "/v1/adapters/secret",
        "/v1/adapters/secret/versions/1",
        "/v1/adapters/secret/versions/1/files/adapter_model.safetensors",
        "/v1/resolve?ref=secret",
        "/v1/resolve?ref=secret@1",
    ]
    for url in urls:
        r = await http.get(url, headers=B)
        assert r.status_code == 404, url
        assert (await http.get(url.replace("secret", "nothing"), headers=B)).json() == r.json() | {
            "error": r.json()["error"]
            | {"message": r.json()["error"]["message"].replace("secret", "nothing")}
        }
    for method, url, body in [
        ("DELETE", "/v1/adapters/secret", None),
        ("DELETE", "/v1/adapters/secret/versions/1", None),
        ("PUT", "/v1/adapters/secret/aliases/prod", {"version": 1}),
        ("DELETE", "/v1/adapters/secret/aliases/latest", None),
    ]:
        assert (await http.request(method, url, json=body, headers=B)).status_code == 404, url
    # Public: readable by others, changeable only by the owner.
    assert (await http.get("/v1/resolve?ref=shared", headers=B)).json()["owner"] == "acme"
    d = await http.get("/v1/adapters/shared/versions/1/files/adapter_config.json", headers=B)
    assert d.status_code == 200
    assert (await http.delete("/v1/adapters/shared/versions/1", headers=B)).status_code == 403
    assert (await http.delete("/v1/adapters/shared", headers=B)).status_code == 403
    r = await http.put("/v1/adapters/shared/aliases/mine", json={"version": 1}, headers=B)
    assert r.status_code == 403
    assert len(await env.keys()) == 8


async def test_auth(http: httpx.AsyncClient, env: Env) -> None:
    assert (await http.get("/v1/adapters")).status_code == 401
    r = await http.get("/v1/adapters", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and err(r)["type"] == "authentication_error"
    internal = {"Authorization": "Bearer tok-internal"}
    assert (await http.get("/v1/adapters", headers=internal)).status_code == 401  # no tenant header
    bad = internal | {"X-Switchyard-Tenant": "../x"}
    assert (await http.get("/v1/adapters", headers=bad)).status_code == 401
    await upload(http, name="mine")
    as_acme = internal | {"X-Switchyard-Tenant": "acme"}
    assert [a["name"] for a in (await http.get("/v1/adapters", headers=as_acme)).json()["data"]] == ["mine"]
    as_beta = internal | {"X-Switchyard-Tenant": "beta"}
    assert (await http.get("/v1/adapters", headers=as_beta)).json()["data"] == []
    # An API key cannot pick another tenant with the header.
    r = await http.get("/v1/adapters/mine", headers=B | {"X-Switchyard-Tenant": "acme"})
    assert r.status_code == 404


# ------------------------------------------------------------------------------------- events


async def test_event_sequence(http: httpx.AsyncClient, env: Env) -> None:
    await upload(http, visibility="public")
    await upload(http, model=make_adapter(seed=1)[0])
    await http.put("/v1/adapters/ad/aliases/prod", json={"version": 1}, headers=A)
    await http.put("/v1/adapters/ad/aliases/prod", json={"version": 2}, headers=A)
    await http.delete("/v1/adapters/ad/aliases/prod", headers=A)
    await http.delete("/v1/adapters/ad/versions/2", headers=A)
    await http.delete("/v1/adapters/ad", headers=A)
    T = AdapterEvent
    got = [
        (e.type, e.version, e.alias, e.previous_version, [v.version for v in e.versions], dict(e.aliases))
        for e in env.events
    ]
    assert got == [
        (T.TYPE_PUBLISHED, 1, "", 0, [1], {"latest": 1}),
        (T.TYPE_PUBLISHED, 2, "", 0, [1, 2], {"latest": 2}),
        (T.TYPE_ALIAS_MOVED, 1, "prod", 0, [1, 2], {"latest": 2, "prod": 1}),
        (T.TYPE_ALIAS_MOVED, 2, "prod", 1, [1, 2], {"latest": 2, "prod": 2}),
        (T.TYPE_ALIAS_MOVED, 0, "prod", 2, [1, 2], {"latest": 2}),
        (T.TYPE_VERSION_DELETED, 2, "", 0, [1], {"latest": 1}),
        (T.TYPE_DELETED, 0, "", 0, [], {}),
    ]
    first = env.events[0]
    assert (first.name, first.owner, first.visibility) == ("ad", "acme", "public")
    v = first.versions[0]
    assert v.rank == 8 and v.alpha == 16.0 and list(v.target_modules) == ["q_proj", "v_proj"]
    assert v.base_model == "sy-tiny" and len(v.sha256) == 64 and v.size_bytes > 0 and v.created_unix_ns > 0
    assert all(e.sent_unix_ns > 0 for e in env.events)


async def test_failed_publish_is_retried(env: Env) -> None:
    fail = True
    sent: list[AdapterEvent] = []

    async def flaky(ev: AdapterEvent) -> None:
        if fail:
            raise ConnectionError("broker down")
        sent.append(ev)

    catalog = Catalog(env.store, flaky)
    await catalog.load()
    app = create_app(env.settings, catalog)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r") as http:
        assert (await upload(http)).status_code == 201  # stored even though the event failed
        assert await catalog.flush_unsent() == 0
        fail = False
        assert await catalog.flush_unsent() == 1
    assert [(e.type, e.version) for e in sent] == [(AdapterEvent.TYPE_PUBLISHED, 1)]


# ------------------------------------------------------------------------------------- client


async def test_registry_client(http: httpx.AsyncClient, env: Env, tmp_path: Path) -> None:
    model, config = make_adapter()
    await upload(http, model=model, config=config)
    async with RegistryClient(env.settings, transport=env.transport) as client:
        m = await client.resolve("acme", "ad@latest")
        assert m is not None and m.version == 1 and m.sha256 == sha256(model)
        assert await client.resolve("beta", "ad") is None
        assert await client.resolve("acme", "nothing") is None
        with pytest.raises(RegistryError) as ei:
            await client.resolve("acme", "../bad")
        assert ei.value.status == 400
        assert [a.name for a in await client.list_visible("acme")] == ["ad"]
        assert await client.list_visible("beta") == []

        dest = tmp_path / "cache" / "ad" / "v1" / "adapter_model.safetensors"
        got = await client.download("acme", "ad", 1, "adapter_model.safetensors", dest, m.sha256)
        assert got == dest and dest.read_bytes() == model
        cdest = tmp_path / "cache" / "ad" / "v1" / "adapter_config.json"
        await client.download("acme", "ad", 1, "adapter_config.json", cdest, m.config_sha256)
        assert cdest.read_bytes() == config

        other = tmp_path / "cache" / "bad" / "adapter_model.safetensors"
        with pytest.raises(ChecksumMismatch):
            await client.download("acme", "ad", 1, "adapter_model.safetensors", other, "0" * 64)
        assert list(other.parent.iterdir()) == []  # no partial or temp file left
        with pytest.raises(RegistryError) as ei:
            await client.download("beta", "ad", 1, "adapter_model.safetensors", other, m.sha256)
        assert ei.value.status == 404


# ------------------------------------------------------------------------------------- real broker


async def test_main_wiring_publishes_to_broker(broker, topics: str, tmp_path: Path) -> None:
    """services/registry/main.build on the embedded broker: an upload lands on sy.adapters, keyed by name."""
    from services.registry.main import build
    from shared.runtime.bus import Producer
    from shared.runtime.health import Health
    from tests.helpers.kafka import collect

    write_base_model(tmp_path / "models")
    s = load_settings(
        kafka_bootstrap=broker.bootstrap,
        topic_prefix=topics,
        models_dir=tmp_path / "models",
        storage_dir=tmp_path / "objects",
        api_keys={"sk-a": "acme"},
    )
    producer = Producer(s, client_id="registry-test")
    await producer.start()
    try:
        svc = await build(s, producer, Health("registry"))
        assert svc.app is not None
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=svc.app), base_url="http://r") as http:
            assert (await upload(http)).status_code == 201
    finally:
        await producer.stop()
    recs = await collect(broker.bootstrap, s.topic("adapters"), 1)
    ev = AdapterEvent.FromString(recs[0].value)
    assert recs[0].key == b"ad" and ev.type == AdapterEvent.TYPE_PUBLISHED and ev.version == 1
    assert [v.version for v in ev.versions] == [1] and dict(ev.aliases) == {"latest": 1}


# ------------------------------------------------------------------------------------- admission


async def test_adapter_quota_per_tenant_is_429_with_retry_after(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.settings = env.settings.model_copy(update={"tenant_max_adapters": 2})
    async with await env.start() as http:
        assert (await upload(http, "one")).status_code == 201
        assert (await upload(http, "two")).status_code == 201
        over = await upload(http, "three")
        assert over.status_code == 429 and err(over)["code"] == "too_many_adapters", over.text
        assert int(over.headers["retry-after"]) >= 1
        assert (await upload(http, "two")).status_code == 201  # a new version of one it owns still fits
        assert (await upload(http, "b-one", headers=B)).status_code == 201  # another tenant's quota
        assert (await http.delete("/v1/adapters/one", headers=A)).status_code == 204
        assert (await upload(http, "three")).status_code == 201  # room again


async def test_every_tenant_route_of_the_registry_is_rate_limited(tmp_path: Path) -> None:
    """Each route in the OpenAPI document a tenant can call answers 429 + Retry-After once the
    tenant's rate is spent; the internal token (the services' own lookups) is not counted."""
    env = Env(tmp_path)
    env.settings = env.settings.model_copy(
        update={"gateway_rate_limits": {"acme": 0.01}, "gateway_rate_burst_s": 100.0}  # 1 per 100 s
    )
    async with await env.start() as http:
        spec = (await http.get("/openapi.json")).json()
        routes = [
            (
                method.upper(),
                path.replace("{name}", "ad")
                .replace("{version}", "1")
                .replace("{alias}", "prod")
                .replace("{filename}", "adapter_model.safetensors"),
            )
            for path, ops in spec["paths"].items()
            for method in ops
        ]
        assert len(routes) >= 9, routes
        assert (await http.get("/v1/adapters", headers=A)).status_code == 200  # spends the one request
        for method, path in routes:
            r = await http.request(method, path, headers=A, json={"version": 1} if method == "PUT" else None)
            assert r.status_code == 429, (method, path, r.status_code, r.text)
            assert err(r)["code"] == "rate_limit_exceeded" and 1 <= int(r.headers["retry-after"]) <= 100
        assert (await http.get("/v1/adapters", headers=B)).status_code == 200  # other tenants unaffected
        internal = {"Authorization": "Bearer tok-internal", "X-Switchyard-Tenant": "acme"}
        assert (await http.get("/v1/adapters", headers=internal)).status_code == 200


async def test_every_registry_route_documents_its_answers_with_a_schema(http: httpx.AsyncClient) -> None:
    """/openapi.json gives each operation a schema for its success answer (none for a 204) and an
    ErrorBody for its errors: a 400 for a malformed request, never FastAPI's 422 shape."""
    spec = (await http.get("/openapi.json")).json()
    ops = [(m, p, op) for p, ops in spec["paths"].items() for m, op in ops.items()]
    assert len(ops) >= 10
    for method, path, op in ops:
        answers = op["responses"]
        ok = [s for s in answers if s.startswith("2")]
        assert len(ok) == 1, (method, path, ok)
        if ok[0] != "204":
            assert all("schema" in c for c in answers[ok[0]]["content"].values()), (method, path)
        for status in ("400", "401", "404", "422", "429"):
            schema = answers[status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]
