"""Adapters are visible (issue 38): `/v1/models` lists each adapter a tenant may use with its
`parent`, versions and aliases; `GET /v1/models/{id}` answers base models, adapters and `name@3` /
`name@alias` ids (the card says which version the id pins now) and OpenAI's 404 for anything else;
replies name the `adapter@version` that answered (`system_fingerprint` on the body and on every
stream chunk, `switchyard.adapter`, `X-Switchyard-Adapter`, and an `adapter_resolve` breakdown row).

The registry is a fake with real `Adapter`/`Manifest` shapes; the whole path is
tests/e2e/test_adapter_cache.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import httpx
import openai
import pytest
from pydantic import BaseModel

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.models import protocol as models_protocol
from shared.adapters.registry_client import Adapter, Manifest
from shared.openai import protocol
from shared.openai.format import response_body
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Kind
from tests.helpers.answering import Answering

ACME, BETA = {"Authorization": "Bearer sk-a"}, {"Authorization": "Bearer sk-b"}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
T0 = 1_700_000_000


def manifest(name: str, version: int, owner: str, visibility: str, base: str = "sy-tiny") -> Manifest:
    return Manifest(
        name=name,
        version=version,
        owner=owner,
        visibility=visibility,  # type: ignore[arg-type]
        sha256=f"{version:02d}" * 32,
        size_bytes=1024,
        config_sha256="cd" * 32,
        rank=8,
        alpha=16,
        target_modules=["q_proj", "v_proj"],
        base_model=base,
        created_unix_ns=(T0 + version) * 10**9,
    )


class Registry:
    """acme's private `acme-lora` (versions 1 and 3; 2 was deleted; `prod` → 1, `latest` → 3) and
    beta's public `shared-lora`; `down` makes every call fail. Counts its calls."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0
        self.adapters = [
            Adapter(
                name="acme-lora",
                owner="acme",
                visibility="private",
                versions=[manifest("acme-lora", v, "acme", "private") for v in (1, 3)],
                aliases={"latest": 3, "prod": 1},
            ),
            Adapter(
                name="shared-lora",
                owner="beta",
                visibility="public",
                versions=[manifest("shared-lora", 1, "beta", "public")],
                aliases={"latest": 1},
            ),
        ]

    def visible(self, tenant: str) -> list[Adapter]:
        return [a for a in self.adapters if a.owner == tenant or a.visibility == "public"]

    async def list_visible(self, tenant: str) -> list[Adapter]:
        self.calls += 1
        if self.down:
            raise ConnectionError("registry unreachable")
        return self.visible(tenant)

    async def resolve(self, tenant: str, ref: str) -> Manifest | None:
        self.calls += 1
        if self.down:
            raise ConnectionError("registry unreachable")
        name, _, sel = ref.partition("@")
        for a in self.visible(tenant):
            if a.name == name:
                version = int(sel) if sel.isdigit() else a.aliases.get(sel or "latest")
                return next((m for m in a.versions if m.version == version), None)
        return None


@asynccontextmanager
async def gateway(tmp_path: Path, registry: Registry | None = None) -> AsyncIterator[httpx.AsyncClient]:
    pipe = Answering()
    settings = Settings(var_dir=tmp_path, api_keys={"sk-a": "acme", "sk-b": "beta"}, gateway_timeout_s=3)
    registry = registry or Registry()
    backend = Backend(
        settings=settings,
        submit=pipe.submit,
        replies=pipe.replies,
        store=cast(Any, None),  # no async requests here: the result store is not reached
        ready=lambda: True,
        resolve_adapter=registry.resolve,
        list_adapters=registry.list_visible,
    )
    transport = httpx.ASGITransport(create_app(backend))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        yield http


def strict(model: type[BaseModel], body: Any) -> None:
    """`body` is `model` exactly: no key the model lacks, no type changed."""
    assert model.model_validate(body).model_dump(mode="json", exclude_unset=True) == body, body


def openai_client(http: httpx.AsyncClient, key: str = "sk-a") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://gw/v1", api_key=key, http_client=http, max_retries=0)


async def test_models_list_each_adapter_with_parent_versions_and_aliases(tmp_path: Path) -> None:
    async with gateway(tmp_path) as http:
        r = await http.get("/v1/models", headers=ACME)
        assert r.status_code == 200, r.text
        strict(models_protocol.ModelList, r.json())
        cards = {m["id"]: m for m in r.json()["data"]}
        assert cards["sy-tiny"] == {
            "id": "sy-tiny",
            "object": "model",
            "created": 0,
            "owned_by": "switchyard",
            "root": "sy-tiny",
            "parent": None,
        }
        lora = cards["acme-lora"]
        assert lora["parent"] == "sy-tiny" and lora["owned_by"] == "acme"
        assert lora["root"] == "acme-lora@3" and lora["version"] == 3 and lora["created"] == T0 + 3
        assert lora["aliases"] == {"latest": 3, "prod": 1}
        assert [(v["id"], v["version"], v["aliases"]) for v in lora["versions"]] == [
            ("acme-lora@1", 1, ["prod"]),
            ("acme-lora@3", 3, ["latest"]),
        ]
        assert lora["versions"][0] == {
            "id": "acme-lora@1",
            "version": 1,
            "created": T0 + 1,
            "base_model": "sy-tiny",
            "rank": 8,
            "aliases": ["prod"],
        }
        assert cards["shared-lora"]["owned_by"] == "beta"
        # beta sees its public adapter, never acme's private one.
        beta = {m["id"] for m in (await http.get("/v1/models", headers=BETA)).json()["data"]}
        assert "shared-lora" in beta and "acme-lora" not in beta
        # What the openai client reads.
        listed = {m.id: m for m in (await openai_client(http).models.list()).data}
        assert listed["acme-lora"].model_extra is not None
        assert listed["acme-lora"].model_extra["versions"][1]["id"] == "acme-lora@3"


@pytest.mark.parametrize(
    ("model_id", "root", "version"),
    [
        ("acme-lora", "acme-lora@3", 3),
        ("acme-lora@1", "acme-lora@1", 1),
        ("acme-lora@3", "acme-lora@3", 3),
        ("acme-lora@prod", "acme-lora@1", 1),
        ("acme-lora@latest", "acme-lora@3", 3),
        ("shared-lora", "shared-lora@1", 1),
    ],
)
async def test_get_a_model_by_adapter_name_version_or_alias(
    tmp_path: Path, model_id: str, root: str, version: int
) -> None:
    async with gateway(tmp_path) as http:
        r = await http.get(f"/v1/models/{model_id}", headers=ACME)
        assert r.status_code == 200, r.text
        card = r.json()
        strict(models_protocol.ModelCard, card)
        assert (card["id"], card["root"], card["version"], card["parent"]) == (
            model_id,
            root,
            version,
            "sy-tiny",
        )
        assert card["created"] == T0 + version
        got = await openai_client(http).models.retrieve(model_id)
        assert got.id == model_id and got.model_extra is not None and got.model_extra["root"] == root
        if "@" not in model_id:  # the bare name's card is its /v1/models entry
            listed = {m["id"]: m for m in (await http.get("/v1/models", headers=ACME)).json()["data"]}
            assert card == listed[model_id]


async def test_get_a_base_model_is_its_entry_of_the_list(tmp_path: Path) -> None:
    async with gateway(tmp_path) as http:
        listed = {m["id"]: m for m in (await http.get("/v1/models", headers=ACME)).json()["data"]}
        for model_id in ("sy-tiny", "sy-tiny-bf16"):
            r = await http.get(f"/v1/models/{model_id}", headers=ACME)
            assert r.status_code == 200 and r.json() == listed[model_id], r.text
            assert "versions" not in r.json()
        got = await openai_client(http).models.retrieve("sy-tiny")
        assert got.id == "sy-tiny" and got.owned_by == "switchyard"
        assert (await http.get("/v1/models/sy-tiny")).status_code == 401


LONG = "a" * 10_000
HOSTILE = [
    "nope",
    "acme-lora@2",  # a deleted version
    "acme-lora@9",
    "acme-lora@staging",  # an unknown alias
    "acme-lora@0",
    "acme-lora@",
    "@prod",
    "sy-tiny@1",  # a base model has no versions
    LONG,
    "acme-lora@" + "1" * 5000,
    "org/x",
    "acme-lora/../sy-tiny",
    "..",
    "../../etc/passwd",
    "acme-lora/",
    "ünïcode-lora",
    "名前",
    "acme-lora\u200b",  # a zero-width space after a real name
    " acme-lora",
    "ACME-LORA",
    "acme-lora\x00",
    "%00",
    "acme-lora\n",  # a trailing newline: `$` alone would let it pass as a name
    "acme-lora@prod\n",
    "acme-lora@\u0663",  # ARABIC-INDIC DIGIT THREE: str.isdigit() says yes, it is no version
    "acme-lora@\u00b2",  # SUPERSCRIPT TWO
]


def path_of(model_id: str) -> str:
    """The id as a raw path (curl --path-as-is): percent-encoded, so no client folds `..` away;
    the app sees the id decoded, slashes and dots included."""
    return "/v1/models/" + quote(model_id, safe="@").replace(".", "%2E")


@pytest.mark.parametrize("model_id", HOSTILE, ids=lambda m: repr(m[:40]))
async def test_unknown_versions_aliases_and_hostile_ids_are_openais_404(
    tmp_path: Path, model_id: str
) -> None:
    registry = Registry()
    async with gateway(tmp_path, registry) as http:
        r = await http.get(path_of(model_id), headers=ACME)
        assert r.status_code == 404, (model_id, r.text)
        error = r.json()["error"]
        assert error["type"] == "not_found_error" and error["param"] == "model", r.text
        assert error["code"] == "model_not_found", r.text
        assert error["message"].startswith("The model '") and error["message"].endswith("' does not exist")
        assert len(error["message"]) < 300, "a long id is quoted back cut short"
        with pytest.raises(ValueError if model_id == ".." else openai.NotFoundError):
            await openai_client(http).models.retrieve(model_id)  # the client itself refuses ".."
        # Still answering the next caller.
        assert (await http.get("/v1/models/acme-lora", headers=ACME)).status_code == 200


async def test_empty_id_and_other_tenants_private_adapter_are_404(tmp_path: Path) -> None:
    registry = Registry()
    async with gateway(tmp_path, registry) as http:
        for path in ("/v1/models/", "/v1/models/%20"):
            r = await http.get(path, headers=ACME, follow_redirects=True)
            assert r.status_code == 404, (path, r.text)
            assert r.json()["error"]["code"] == "model_not_found", r.text
        # beta: acme's private adapter does not exist, in every form (the same body as "nope").
        nope = (await http.get("/v1/models/nope", headers=BETA)).json()["error"]
        for model_id in ("acme-lora", "acme-lora@1", "acme-lora@prod", "acme-lora@latest"):
            r = await http.get(f"/v1/models/{model_id}", headers=BETA)
            assert r.status_code == 404, r.text
            assert r.json()["error"] == {**nope, "message": f"The model '{model_id}' does not exist"}


async def test_registry_down_is_503_for_adapter_ids_only(tmp_path: Path) -> None:
    registry = Registry()
    async with gateway(tmp_path, registry) as http:
        registry.down = True
        assert (await http.get("/v1/models/sy-tiny", headers=ACME)).status_code == 200
        ids = {m["id"] for m in (await http.get("/v1/models", headers=ACME)).json()["data"]}
        assert "sy-tiny" in ids and "acme-lora" not in ids  # base models still listed
        for model_id in ("acme-lora", "acme-lora@prod"):
            r = await http.get(f"/v1/models/{model_id}", headers=ACME)
            assert r.status_code == 503 and r.json()["error"]["code"] == "registry_unavailable", r.text
        # An id no adapter can have is a 404 without asking the registry.
        calls = registry.calls
        for model_id in ("org/x", "名前", LONG, "acme-lora\n", "acme-lora@\u0663"):
            r = await http.get(path_of(model_id), headers=ACME)
            assert r.status_code == 404, r.text
        assert registry.calls == calls


def events(text: str) -> list[dict[str, Any]]:
    lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]", text
    return [json.loads(x) for x in lines[:-1]]


@pytest.mark.parametrize(
    ("form", "requested"),
    [
        ({"model": "acme-lora"}, "acme-lora"),
        ({"model": "acme-lora@prod"}, "acme-lora@prod"),
        ({"model": "sy-tiny", "adapter": "acme-lora@1"}, "acme-lora@1"),
    ],
)
async def test_replies_name_the_adapter_version_that_answered(
    tmp_path: Path, form: dict[str, str], requested: str
) -> None:
    pinned = "acme-lora@1" if requested != "acme-lora" else "acme-lora@3"
    async with gateway(tmp_path) as http:
        r = await http.post("/v1/chat/completions", json={**CHAT, **form}, headers=ACME)
        assert r.status_code == 200, r.text
        out = r.json()
        strict(protocol.ChatCompletion, out)
        assert out["model"] == requested  # the name the client sent, as vLLM answers
        assert out["system_fingerprint"] == pinned and out["switchyard"]["adapter"] == pinned
        assert r.headers["x-switchyard-adapter"] == pinned
        rows = [row for row in out["switchyard"]["breakdown"] if row["stage"] == "adapter_resolve"]
        assert len(rows) == 1 and rows[0]["adapter"] == pinned and rows[0]["parent"] == "gateway_accept"
        # The openai client reads it as a typed field.
        extra = {"adapter": form["adapter"]} if "adapter" in form else None
        got = await openai_client(http).chat.completions.create(
            model=form["model"],
            messages=CHAT["messages"],
            max_tokens=4,
            extra_body=extra,  # type: ignore[arg-type]
        )
        assert got.system_fingerprint == pinned

        # Streamed: every chunk names it, the first one included; the header too.
        stream = {**CHAT, **form, "stream": True, "stream_options": {"include_usage": True}}
        r = await http.post("/v1/chat/completions", json=stream, headers=ACME)
        assert r.status_code == 200 and r.headers["x-switchyard-adapter"] == pinned, r.text
        chunks = events(r.text)
        for c in chunks:
            strict(protocol.ChatCompletionChunk, c)
        assert {c["system_fingerprint"] for c in chunks} == {pinned}
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert chunks[-1]["switchyard"]["adapter"] == pinned

        # Text completions alike.
        body = {"prompt": "hi", "max_tokens": 4, **form}
        r = await http.post("/v1/completions", json=body, headers=ACME)
        assert r.status_code == 200 and r.json()["system_fingerprint"] == pinned, r.text
        strict(protocol.Completion, r.json())
        r = await http.post("/v1/completions", json={**body, "stream": True}, headers=ACME)
        assert {c["system_fingerprint"] for c in events(r.text)} == {pinned}


async def test_hostile_adapter_refs_in_requests_are_refused_before_the_registry(tmp_path: Path) -> None:
    """What /v1/models/{id} refuses, a request refuses too: a non-ASCII digit is not a version."""
    registry = Registry()
    async with gateway(tmp_path, registry) as http:
        for ref in ("acme-lora@\u0663", "acme-lora\n", "acme-lora@prod\n", "acme-lora@" + "9" * 65):
            r = await http.post("/v1/chat/completions", json={**CHAT, "model": ref}, headers=ACME)
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", (ref, r.text)
            r = await http.post(
                "/v1/chat/completions", json={**CHAT, "model": "sy-tiny", "adapter": ref}, headers=ACME
            )
            assert r.status_code == 400 and r.json()["error"]["param"] == "adapter", (ref, r.text)
        assert registry.calls == 0


async def test_base_model_replies_name_no_adapter(tmp_path: Path) -> None:
    async with gateway(tmp_path) as http:
        r = await http.post("/v1/chat/completions", json={**CHAT, "model": "sy-tiny"}, headers=ACME)
        out = r.json()
        assert r.status_code == 200 and out["model"] == "sy-tiny", r.text
        assert out["system_fingerprint"] is None and out["switchyard"]["adapter"] is None
        assert "x-switchyard-adapter" not in r.headers
        assert all(row["stage"] != "adapter_resolve" for row in out["switchyard"]["breakdown"])
        r = await http.post(
            "/v1/chat/completions", json={**CHAT, "model": "sy-tiny", "stream": True}, headers=ACME
        )
        assert {c["system_fingerprint"] for c in events(r.text)} == {None}


def test_async_results_name_the_adapter_version() -> None:
    """GET /v1/requests/{id} shows response_body of the final envelope: the pinned ref it carries
    is the whole of what the result store must keep for this."""
    env = Envelope(
        request_id="r1", tenant="acme", kind=Kind.KIND_CHAT, model="sy-tiny", adapter="acme-lora@prod"
    )
    env.adapter_ref.name, env.adapter_ref.version = "acme-lora", 1
    body = response_body(env, T0)
    assert body["system_fingerprint"] == "acme-lora@1" and body["switchyard"]["adapter"] == "acme-lora@1"
    assert body["model"] == "acme-lora@prod"
    strict(protocol.ChatCompletion, body)
    env.ClearField("adapter_ref")
    assert response_body(env, T0)["system_fingerprint"] is None
