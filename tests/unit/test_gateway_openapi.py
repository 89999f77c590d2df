"""The gateway's /openapi.json gives every route a response schema, and the response models
(shared/openai/protocol.py, services/gateway/rollouts/protocol.py) describe what the routes send:
real replies of the app, with a fake pipeline behind it, validate against them strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.models import protocol as models_protocol
from services.gateway.requests.sqlite_store import SqliteResultStore
from services.gateway.rollouts.protocol import Rollout
from services.gateway.rollouts.store import RolloutStore
from shared.batches.store import BatchObject, BatchStore, new_batch_id
from shared.openai import protocol
from shared.runtime.config import Settings
from shared.runtime.storage import open_store
from tests.helpers.answering import Answering

AUTH = {"Authorization": "Bearer sk-a"}
CHAT = {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def app_for(tmp_path: Path, pipe: Answering) -> Any:
    settings = Settings(var_dir=tmp_path, api_keys={"sk-a": "acme"}, gateway_timeout_s=3)
    backend = Backend(
        settings=settings,
        submit=pipe.submit,
        replies=pipe.replies,
        store=SqliteResultStore(tmp_path / "results.sqlite"),
        ready=lambda: True,
        rollouts=RolloutStore(tmp_path / "ro.sqlite"),
    )
    return create_app(backend)


def strict(model: type[BaseModel], body: Any) -> None:
    """`body` is `model` exactly: no key the model lacks (they would be dropped), no type changed."""
    assert model.model_validate(body).model_dump(mode="json", exclude_unset=True) == body, body


def test_every_operation_declares_a_2xx_response_schema(tmp_path: Path) -> None:
    doc = app_for(tmp_path, Answering()).openapi()
    missing = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            ok = {code: r for code, r in op["responses"].items() if code.startswith("2")}
            schemas = [c.get("schema") for r in ok.values() for c in r.get("content", {}).values()]
            json_schema = [
                c.get("schema", {})
                for r in ok.values()
                for t, c in r.get("content", {}).items()
                if t == "application/json"
            ]
            if not schemas or not all(schemas) or any(s == {} for s in json_schema):
                missing.append(f"{method.upper()} {path}")
    assert not missing, f"no response schema: {missing}"
    assert len(doc["paths"]) >= 12


async def test_replies_match_the_response_models(tmp_path: Path) -> None:
    pipe = Answering()
    app = app_for(tmp_path, pipe)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as http:
        r = await http.post("/v1/chat/completions", json=CHAT, headers=AUTH)
        assert r.status_code == 200, r.text
        strict(protocol.ChatCompletion, r.json())
        r = await http.post(
            "/v1/completions", json={"model": "sy-tiny", "prompt": "hi", "max_tokens": 4}, headers=AUTH
        )
        assert r.status_code == 200, r.text
        strict(protocol.Completion, r.json())
        for path, body, chunk in (
            ("/v1/chat/completions", CHAT, protocol.ChatCompletionChunk),
            ("/v1/completions", {"model": "sy-tiny", "prompt": "hi"}, protocol.CompletionChunk),
        ):
            r = await http.post(
                path, json={**body, "stream": True, "stream_options": {"include_usage": True}}, headers=AUTH
            )
            events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
            assert events[-1] == "[DONE]" and len(events) >= 3, r.text
            for ev in events[:-1]:
                strict(chunk, json.loads(ev))
        strict(models_protocol.ModelList, (await http.get("/v1/models", headers=AUTH)).json())

        r = await http.post("/v1/requests", json={"body": CHAT}, headers=AUTH)
        assert r.status_code == 202, r.text
        strict(protocol.AsyncRequestStatus, r.json())
        r = await http.get(f"/v1/requests/{r.json()['id']}", headers=AUTH)
        strict(protocol.AsyncRequestStatus, r.json())

        rollout = {
            "policy": {"model": "sy-tiny"},
            "prompts": [{"prompt": "Repeat: amber", "references": {"answer": "amber"}}],
            "n": 2,
            "reward": {"functions": [{"name": "exact_match"}]},
        }
        r = await http.post("/v1/rollouts", json=rollout, headers=AUTH)
        assert r.status_code == 202, r.text
        strict(Rollout, r.json())
        strict(Rollout, (await http.get(f"/v1/rollouts/{r.json()['id']}", headers=AUTH)).json())

        files = {"file": ("in.jsonl", b'{"custom_id": "a"}\n', "application/jsonl")}
        r = await http.post("/v1/files", files=files, data={"purpose": "batch"}, headers=AUTH)
        assert r.status_code == 200, r.text
        file_id = r.json()["id"]
        strict(protocol.FileObject, r.json())
        strict(protocol.FileList, (await http.get("/v1/files", headers=AUTH)).json())
        strict(protocol.FileObject, (await http.get(f"/v1/files/{file_id}", headers=AUTH)).json())

        store = BatchStore(open_store(app.state.gate.settings))
        batch = BatchObject(
            id=new_batch_id(),
            endpoint="/v1/chat/completions",
            input_file_id=file_id,
            completion_window="24h",
            created_at=0,
        )
        await store.put_batch("acme", batch)
        strict(protocol.BatchList, (await http.get("/v1/batches", headers=AUTH)).json())
        strict(protocol.Batch, (await http.get(f"/v1/batches/{batch.id}", headers=AUTH)).json())
        strict(protocol.Batch, (await http.post(f"/v1/batches/{batch.id}/cancel", headers=AUTH)).json())
        strict(protocol.FileDeleted, (await http.delete(f"/v1/files/{file_id}", headers=AUTH)).json())
