"""Two in-process gateway replicas on one real Redis (issue 37): what one accepts, the other knows.

The stores are the real ones (RedisResultStore, RolloutClaims over redis-server; each replica its
own RolloutStore file, as each pod has); the pipeline behind them is a recorder.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.errors import ApiError
from services.gateway.replies import ReplyRouter
from services.gateway.requests.redis_store import RedisResultStore
from services.gateway.rollouts.claims import RolloutClaims
from services.gateway.rollouts.follow import RewardsReader
from services.gateway.rollouts.store import RolloutStore
from services.gateway.stream_slots import SharedStreams
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Kind
from tests.helpers.redis import redis_server

A = {"Authorization": "Bearer sk-a"}
B = {"Authorization": "Bearer sk-b"}
C = {"Authorization": "Bearer sk-c"}
D = {"Authorization": "Bearer sk-d"}
KEYS = {"sk-a": "tenant-a", "sk-b": "tenant-b", "sk-c": "tenant-c", "sk-d": "tenant-d"}


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
async def replica(
    tmp_path: Path, name: str, url: str, pipe: Recorder, **settings: object
) -> AsyncIterator[httpx.AsyncClient]:
    """One replica's app; `client.backend` and `client.gate` are its state, for the tests."""
    s = Settings(var_dir=tmp_path / name, api_keys=KEYS, gateway_state_url=url, **settings)  # type: ignore[arg-type]
    store, claims = RedisResultStore(url), RolloutClaims(url, 3600)
    streams = SharedStreams(url, name, s.gateway_max_streams_per_tenant)
    backend = Backend(
        settings=s,
        submit=pipe.submit,
        replies=ReplyRouter(),
        store=store,
        ready=lambda: True,
        rollouts=RolloutStore(tmp_path / name / "rollouts.sqlite"),
        rollout_claims=claims,
        stream_slots=streams,
    )
    app = create_app(backend)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as c:
            c.backend, c.gate = backend, app.state.gate  # type: ignore[attr-defined]
            yield c
    finally:
        await store.close()
        await claims.close()
        await streams.close()


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


def finished_groups(tenant: str, rollout_id: str, groups: int) -> list[Envelope]:
    """The sy.rewards group records that finish a rollout, as the reward stage writes them."""
    out = []
    for i in range(groups):
        env = Envelope(tenant=tenant, kind=Kind.KIND_ROLLOUT, request_id=f"{rollout_id}-g{i}")
        env.rollout.rollout_id, env.rollout.group_index, env.rollout.num_groups = rollout_id, i, groups
        env.rollout.group.SetInParent()
        out.append(env)
    return out


async def test_a_tenants_unfinished_rollouts_quota_counts_over_both_replicas(
    tmp_path: Path, redis_url: str
) -> None:
    """SY_TENANT_MAX_ROLLOUTS=1: one unfinished rollout on A fills the tenant's quota on B too,
    though B's own store has never seen it; once sy.rewards finishes it, B accepts the next."""
    pipe = Recorder()
    async with (
        replica(tmp_path, "a", redis_url, pipe, tenant_max_rollouts=1) as ga,
        replica(tmp_path, "b", redis_url, pipe, tenant_max_rollouts=1) as gb,
    ):
        assert (await ga.post("/v1/rollouts", json=rollout("q-1"), headers=C)).status_code == 202
        over = await gb.post("/v1/rollouts", json=rollout("q-2"), headers=C)
        assert over.status_code == 429, over.text
        assert over.json()["error"]["code"] == "too_many_rollouts"
        # A retry of the accepted one is the same job, not a second one over the quota.
        again = await gb.post("/v1/rollouts", json=rollout("q-1"), headers=C)
        assert again.status_code == 202 and again.json()["id"] == "ro-q-1", again.text
        # Another tenant has its own quota.
        assert (await gb.post("/v1/rollouts", json=rollout("q-2"), headers=D)).status_code == 202
        # B reads the rollout's groups from sy.rewards: it finished, the quota is free again.
        reader = RewardsReader(gb.backend.settings, gb.backend.rollouts, gb.backend.rollout_claims)  # type: ignore[attr-defined]
        await reader.take(finished_groups("tenant-c", "ro-q-1", 1))
        assert (await gb.post("/v1/rollouts", json=rollout("q-2"), headers=C)).status_code == 429  # 1 of 2
        await reader.take(finished_groups("tenant-c", "ro-q-1", 2))
        done = await gb.post("/v1/rollouts", json=rollout("q-2"), headers=C)
        assert done.status_code == 202, done.text
        assert [e.rollout.rollout_id for e in pipe.submitted if e.tenant == "tenant-c"] == [
            "ro-q-1",
            "ro-q-2",
        ]


async def test_a_tenants_open_streams_are_counted_over_both_replicas(tmp_path: Path, redis_url: str) -> None:
    """SY_GATEWAY_MAX_STREAMS_PER_TENANT=2: a stream on A and one on B fill the tenant's two; a
    third on either is refused (429) until one ends; requests that do not stream are not held."""
    pipe = Recorder()
    async with (
        replica(tmp_path, "a", redis_url, pipe, gateway_max_streams_per_tenant=2) as ga,
        replica(tmp_path, "b", redis_url, pipe, gateway_max_streams_per_tenant=2) as gb,
    ):
        one = await ga.gate.admit("tenant-d", True)  # type: ignore[attr-defined]
        two = await gb.gate.admit("tenant-d", True)  # type: ignore[attr-defined]
        for gate in (ga.gate, gb.gate):  # type: ignore[attr-defined]
            with pytest.raises(ApiError) as refused:
                await gate.admit("tenant-d", True)
            assert refused.value.status == 429 and refused.value.code == "too_many_streams"
        (await ga.gate.admit("tenant-d", False)).release()  # type: ignore[attr-defined]
        (await ga.gate.admit("tenant-a", True)).release()  # type: ignore[attr-defined]
        one.release()
        await asyncio.sleep(0.2)  # the slot goes back in the background
        three = await gb.gate.admit("tenant-d", True)  # type: ignore[attr-defined]
        two.release()
        three.release()


async def test_a_dead_replicas_stream_slots_run_out_and_a_live_ones_are_renewed(redis_url: str) -> None:
    dead = SharedStreams(redis_url, "dead", 1, lease_s=1.0)
    live = SharedStreams(redis_url, "live", 1, lease_s=1.0)
    other = SharedStreams(redis_url, "other", 1, lease_s=1.0)
    try:
        assert await dead.take("tenant-lease") is not None
        assert await other.take("tenant-lease") is None
        await asyncio.sleep(1.3)  # `dead` never renews: its slot runs out
        held = await live.take("tenant-lease")
        assert held is not None
        for _ in range(4):  # `live` renews: its slot outlasts its lease
            await asyncio.sleep(0.4)
            await live.renew()
            assert await other.take("tenant-lease") is None
        live.give("tenant-lease", held)
        await asyncio.sleep(0.2)
        assert await other.take("tenant-lease") is not None
    finally:
        for s in (dead, live, other):
            await s.close()


async def test_stream_slots_are_counted_per_replica_while_redis_is_down() -> None:
    down = SharedStreams("redis://127.0.0.1:1/0", "alone", 2)
    try:
        slots = [await down.take("tenant-x") for _ in range(3)]
        assert slots[0] and slots[1] and slots[2] is None, slots
        down.give("tenant-x", slots[0])
        assert await down.take("tenant-x") is not None
    finally:
        await down.close()
