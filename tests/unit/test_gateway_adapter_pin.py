"""The gateway pins a request's adapter (name@version, owner checked by the registry) before the
cache peek and the cache key, in both request forms (issue 33, DESIGN §6):

- `model=<adapter>` and `model=<base>, adapter=<adapter>` pin the same ref, so both reach the same
  cache key and scope, and neither is the base model's key (a cached base answer never answers an
  adapter request);
- another tenant's private adapter is a 404 in both forms, before anything is peeked or produced;
- the reply says which adapter version answered (`switchyard.adapter`, `X-Switchyard-Adapter`).

The whole path (real registry, cache and worker) is tests/e2e/test_adapter_cache.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
from switchyard.v1.envelope_pb2 import Choice, Response, Usage

from services.cache.keys import cache_key
from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.replies import ReplyRouter
from services.gateway.requests.sqlite_store import SqliteResultStore
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.telemetry import add_timing

KEYS = {"sk-a": "acme", "sk-b": "beta"}
ACME, BETA = {"Authorization": "Bearer sk-a"}, {"Authorization": "Bearer sk-b"}
PROMPT = [{"role": "user", "content": "Repeat: lantern"}]
BASE = {"model": "sy-tiny", "messages": PROMPT, "max_tokens": 4, "temperature": 0}
BY_MODEL = {**BASE, "model": "acme-lora"}
BY_FIELD = {**BASE, "adapter": "acme-lora"}
MANIFEST = {
    "name": "acme-lora",
    "version": 3,
    "sha256": "ab" * 32,
    "owner": "acme",
    "rank": 8,
    "base_model": "sy-tiny",
}


def answered(env: Envelope, text: str, tier: str = "") -> Envelope:
    out = Envelope.FromString(env.SerializeToString())
    out.response.CopyFrom(
        Response(
            choices=[Choice(text=text, finish_reason="stop")],
            usage=Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2),
        )
    )
    if tier:
        out.cache.hit, out.cache.tier, out.cache.similarity = True, tier, 1.0
        add_timing(out, "cache_peek", time.time_ns(), time.time_ns())
    return out


class Fake:
    """An exact-tier cache keyed by services/cache/keys.py (what the cache service computes from
    the peeked envelope), a pipeline that answers and writes back, and a registry in which
    `acme-lora` is acme's private adapter (invisible to beta: None, as the registry's 404)."""

    def __init__(self) -> None:
        self.replies = ReplyRouter()
        self.entries: dict[str, str] = {}  # exact key -> answer
        self.peeked: list[Envelope] = []
        self.submitted: list[Envelope] = []
        self.resolved: list[tuple[str, str]] = []

    async def resolve(self, tenant: str, ref: str) -> dict[str, Any] | None:
        self.resolved.append((tenant, ref))
        name = ref.partition("@")[0]
        return dict(MANIFEST) if name == "acme-lora" and tenant == "acme" else None

    async def peek(self, request: bytes, request_id: str, tenant: str) -> Envelope | None:
        env = Envelope.FromString(request)
        self.peeked.append(env)
        hit = self.entries.get(cache_key(env).exact)
        return answered(env, hit, "exact") if hit is not None else None

    async def submit(self, env: Envelope, topic: str | None = None) -> None:
        copy = Envelope.FromString(env.SerializeToString())
        self.submitted.append(copy)
        ref = copy.adapter_ref
        text = f"answer of {ref.name}@{ref.version}" if ref.name else "answer of the base"
        self.entries[cache_key(copy).exact] = text  # the cache's write-back

        async def later() -> None:
            await asyncio.sleep(0.01)
            self.replies.on_response(answered(copy, text), time.time_ns())

        asyncio.get_running_loop().create_task(later())


def client(tmp_path: Path, fake: Fake) -> httpx.AsyncClient:
    settings = Settings(var_dir=tmp_path, api_keys=KEYS, gateway_timeout_s=3, cache_peek_hold_ms=50)
    backend = Backend(
        settings=settings,
        submit=fake.submit,
        replies=fake.replies,
        store=SqliteResultStore(tmp_path / "results.sqlite"),
        ready=lambda: True,
        resolve_adapter=fake.resolve,
        peek=fake.peek,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(create_app(backend)), base_url="http://gw")


async def test_adapter_requests_are_pinned_before_the_cache_in_both_forms(tmp_path: Path) -> None:
    fake = Fake()
    async with client(tmp_path, fake) as http:
        r = await http.post("/v1/chat/completions", json=BASE, headers=ACME)
        assert r.status_code == 200, r.text
        assert r.json()["switchyard"]["adapter"] is None and "x-switchyard-adapter" not in r.headers
        # The base answer is cached: the same base request is an exact hit.
        r = await http.post("/v1/chat/completions", json=BASE, headers=ACME)
        assert r.json()["switchyard"]["cache"]["tier"] == "exact"
        assert r.json()["choices"][0]["message"]["content"] == "answer of the base"

        for body in (BY_MODEL, BY_FIELD):
            r = await http.post("/v1/chat/completions", json=body, headers=ACME)
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["choices"][0]["message"]["content"] == "answer of acme-lora@3", body
            assert out["switchyard"]["adapter"] == "acme-lora@3"
            assert r.headers["x-switchyard-adapter"] == "acme-lora@3"
            assert out["model"] == "acme-lora"  # what the client named, as vLLM's server answers

    # What the cache saw: both forms carry the same pinned ref, hence the same key and scope,
    # and that key is not the base model's.
    base, by_model, by_field = fake.peeked[0], fake.peeked[2], fake.peeked[3]
    for env in (by_model, by_field):
        ref = env.adapter_ref
        assert (ref.name, ref.version, ref.owner, ref.base_model) == ("acme-lora", 3, "acme", "sy-tiny")
        assert env.model == "sy-tiny" and env.adapter == "acme-lora"
    kb, km, kf = cache_key(base), cache_key(by_model), cache_key(by_field)
    assert km.exact == kf.exact and km.scope() == kf.scope()
    assert km.adapter == "acme-lora@3" and kb.adapter == ""
    assert kb.exact != km.exact and kb.scope() != km.scope()
    # The first adapter request of each form was not answered from the base entry: one went to
    # the pipeline (a miss), the second form hit the adapter's own entry.
    assert [e.adapter_ref.name for e in fake.submitted] == ["", "acme-lora"]


async def test_another_tenants_private_adapter_is_404_in_both_forms(tmp_path: Path) -> None:
    fake = Fake()
    async with client(tmp_path, fake) as http:
        await http.post("/v1/chat/completions", json=BASE, headers=ACME)  # a base entry exists
        for body, code in ((BY_MODEL, "model_not_found"), (BY_FIELD, "adapter_not_found")):
            r = await http.post("/v1/chat/completions", json=body, headers=BETA)
            assert r.status_code == 404, (body, r.text)
            assert r.json()["error"]["code"] == code
            assert "acme" not in r.json()["error"]["message"].replace("acme-lora", "")
            legacy = {k: v for k, v in body.items() if k != "messages"}
            r = await http.post("/v1/completions", json={**legacy, "prompt": "x"}, headers=BETA)
            assert r.status_code == 404, (body, r.text)
        # Also on the async route (it goes through preprocess, but is refused here at once).
        r = await http.post(
            "/v1/requests", json={"endpoint": "/v1/chat/completions", "body": BY_FIELD}, headers=BETA
        )
        assert r.status_code == 404, r.text
    assert ("beta", "acme-lora") in fake.resolved
    assert len(fake.peeked) == 1 and len(fake.submitted) == 1  # only acme's base request


async def test_adapter_field_for_another_base_or_both_forms_at_once_is_refused(tmp_path: Path) -> None:
    fake = Fake()
    async with client(tmp_path, fake) as http:
        r = await http.post("/v1/chat/completions", json={**BY_FIELD, "adapter": "Bad Name"}, headers=ACME)
        assert r.status_code == 400 and r.json()["error"]["param"] == "adapter"
        r = await http.post("/v1/chat/completions", json={**BY_MODEL, "adapter": "acme-lora@2"}, headers=ACME)
        assert r.status_code == 400, r.text
        # model=<adapter> with the same adapter in the field is the same request.
        r = await http.post("/v1/chat/completions", json={**BY_MODEL, "adapter": "acme-lora"}, headers=ACME)
        assert r.status_code == 200 and r.json()["switchyard"]["adapter"] == "acme-lora@3"
    assert fake.peeked[-1].adapter_ref.version == 3
