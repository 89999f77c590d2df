"""Two in-process gateway replicas on one real Redis (issue 37): what one accepts, the other knows.

The stores are the real ones (RedisResultStore, RolloutClaims over redis-server; each replica its
own RolloutStore file, as each pod has); the pipeline behind them is a recorder.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.replies import ReplyRouter
from services.gateway.requests.redis_store import RedisResultStore
from services.gateway.rollouts.claims import RolloutClaims
from services.gateway.rollouts.store import RolloutStore
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Kind
from tests.helpers.redis import redis_server

A = {"Authorization": "Bearer sk-a"}
B = {"Authorization": "Bearer sk-b"}


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


class Recorder:
    def __init__(self) -> None:
        self.submitted: list[Envelope] = []

    async def submit(self, env: Envelope, topic: str | None = None) -> None:
        self.submitted.append(Envelope.FromString(env.SerializeToString()))


@asynccontextmanager
async def replica(tmp_path: Path, name: str, url: str, pipe: Recorder) -> AsyncIterator[httpx.AsyncClient]:
    s = Settings(
        var_dir=tmp_path / name, api_keys={"sk-a": "tenant-a", "sk-b": "tenant-b"}, gateway_state_url=url
    )
    store, claims = RedisResultStore(url), RolloutClaims(url, 3600)
    backend = Backend(
        settings=s,
        submit=pipe.submit,
        replies=ReplyRouter(),
        store=store,
        ready=lambda: True,
        rollouts=RolloutStore(tmp_path / name / "rollouts.sqlite"),
        rollout_claims=claims,
    )
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(create_app(backend)), base_url="http://gw"
        ) as c:
            yield c
    finally:
        await store.close()
        await claims.close()


def rollout(rollout_id: str | None) -> dict:
    body = {
        "policy": {"model": "sy-tiny"},
        "prompts": [{"messages": [{"role": "user", "content": f"Repeat: {w}"}]} for w in ("amber", "cabin")],
        "n": 2,
        "sampling": {"temperature": 0.5, "max_tokens": 8},
        "reward": {"functions": [{"name": "task_check"}]},
    }
    if rollout_id:
        body["rollout_id"] = rollout_id
    return body


async def test_a_rollout_accepted_on_one_replica_is_found_and_retried_on_the_other(
    tmp_path: Path, redis_url: str
) -> None:
    pipe = Recorder()
    async with replica(tmp_path, "a", redis_url, pipe) as ga, replica(tmp_path, "b", redis_url, pipe) as gb:
        r = await ga.post("/v1/rollouts", json=rollout("step-1"), headers=A)
        assert r.status_code == 202, r.text
        assert r.json()["id"] == "ro-step-1"
        # B knows it at once: no sy.rewards record has arrived anywhere yet.
        got = await gb.get("/v1/rollouts/ro-step-1", params={"samples": False}, headers=A)
        assert got.status_code == 200, got.text
        assert got.json()["num_groups"] == 2 and got.json()["status"] == "queued"
        # The retry on B is the same job: nothing is sent again.
        again = await gb.post("/v1/rollouts", json=rollout("step-1"), headers=A)
        assert again.status_code == 202 and again.json()["id"] == "ro-step-1"
        assert [(e.tenant, e.rollout.rollout_id, e.kind) for e in pipe.submitted] == [
            ("tenant-a", "ro-step-1", Kind.KIND_ROLLOUT)
        ]
        # Another tenant's id of the same name is its own job, and A's is not its to read.
        assert (await gb.get("/v1/rollouts/ro-step-1", headers=B)).status_code == 404
        other = await gb.post("/v1/rollouts", json=rollout("step-1"), headers=B)
        assert other.status_code == 202 and len(pipe.submitted) == 2


async def test_an_async_request_and_its_key_are_the_same_on_both_replicas(
    tmp_path: Path, redis_url: str
) -> None:
    pipe = Recorder()
    body = {
        "request_id": "inv-7",
        "body": {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}]},
    }
    async with replica(tmp_path, "a", redis_url, pipe) as ga, replica(tmp_path, "b", redis_url, pipe) as gb:
        first = await ga.post("/v1/requests", json=body, headers=A)
        assert first.status_code == 202, first.text
        again = await gb.post("/v1/requests", json=body, headers=A)
        assert again.status_code == 202 and again.json()["id"] == first.json()["id"]  # still queued
        assert len(pipe.submitted) == 1
        for by in (first.json()["id"], "inv-7"):
            got = await gb.get(f"/v1/requests/{by}", headers=A)
            assert got.status_code == 200 and got.json()["id"] == first.json()["id"], got.text
        assert (await gb.get("/v1/requests/inv-7", headers=B)).status_code == 404
