"""The gateway answers a request's faults in one order on every admitted route: no key (401),
then a bad body (400), then a replica that is not ready (503). A client whose body can never
pass hears so at once, not after retrying a 503 that was never the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.replies import ReplyRouter
from services.gateway.requests.sqlite_store import SqliteResultStore
from services.gateway.rollouts.store import RolloutStore
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope

AUTH = {"Authorization": "Bearer sk-a"}
CHAT = {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
ROLLOUT = {
    "policy": {"model": "sy-tiny"},
    "prompts": [{"prompt": "Repeat: amber", "references": {"answer": "amber"}}],
    "n": 2,
    "reward": {"functions": [{"name": "exact_match"}]},
}


def unready_app(tmp_path: Path) -> Any:
    """A gateway whose replica never becomes ready; nothing is ever submitted."""

    async def submit(env: Envelope, topic: str | None = None) -> None:
        raise AssertionError("nothing may be submitted by a replica that is not ready")

    settings = Settings(var_dir=tmp_path, api_keys={"sk-a": "acme"}, gateway_timeout_s=3)
    backend = Backend(
        settings=settings,
        submit=submit,
        replies=ReplyRouter(),
        store=SqliteResultStore(tmp_path / "results.sqlite"),
        ready=lambda: False,
        rollouts=RolloutStore(tmp_path / "ro.sqlite"),
    )
    return create_app(backend)


@pytest.mark.parametrize(
    ("path", "good", "bad"),
    [
        ("/v1/requests", {"body": CHAT}, {"body": CHAT, "surprise": 1}),
        ("/v1/rollouts", ROLLOUT, {**ROLLOUT, "n": 0}),
        ("/v1/chat/completions", CHAT, {**CHAT, "messages": []}),
        ("/v1/completions", {"model": "sy-tiny", "prompt": "hi"}, {"model": "sy-tiny", "prompt": ""}),
    ],
)
async def test_401_then_400_then_503(tmp_path: Path, path: str, good: Any, bad: Any) -> None:
    app = unready_app(tmp_path)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as http:
        no_key = await http.post(path, json=bad)
        assert no_key.status_code == 401, no_key.text
        invalid = await http.post(path, json=bad, headers=AUTH)
        assert invalid.status_code == 400, invalid.text
        unready = await http.post(path, json=good, headers=AUTH)
        assert unready.status_code == 503, unready.text
        assert unready.json()["error"]["code"] == "not_ready"
