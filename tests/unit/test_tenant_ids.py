"""DESIGN §6: every id a client chooses is scoped by tenant, in every store and dedupe set.

Two tenants use the same rollout_id, the same async request_id / Idempotency-Key and identical
batch input files; each gets its own job and its own answers, and each tenant's own retry with
the same id stays idempotent. The stores further down the pipeline (reward dedupe, router
pending table, gateway accepted log) have their own tests beside them (test_rewards.py,
test_router_pools.py, test_accepted_log.py); tests/e2e/test_tenant_ids.py runs it all through
the stack.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
from switchyard.v1.envelope_pb2 import Choice

from services.batch.collect import Collector
from services.batch.job import BatchJob
from services.cache.keys import entry_id
from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.replies import ReplyRouter
from services.gateway.requests.serving import async_result
from services.gateway.requests.sqlite_store import SqliteResultStore
from services.gateway.rollouts.store import RolloutStore, store_path
from shared.batches.store import BatchObject, BatchStore, new_batch_id, read_jsonl
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Kind
from shared.runtime.storage import LocalStore

A = {"Authorization": "Bearer sk-a"}
B = {"Authorization": "Bearer sk-b"}
CHAT = "/v1/chat/completions"


def settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(var_dir=tmp_path, api_keys={"sk-a": "tenant-a", "sk-b": "tenant-b"}, **kw)


class Pipeline:
    """The process side of the gateway: records what it was given."""

    def __init__(self) -> None:
        self.submitted: list[Envelope] = []
        self.replies = ReplyRouter()

    async def submit(self, env: Envelope, topic: str | None = None) -> None:
        self.submitted.append(Envelope.FromString(env.SerializeToString()))


def gateway(
    tmp_path: Path, pipe: Pipeline, store: SqliteResultStore, rollouts: RolloutStore
) -> httpx.AsyncClient:
    backend = Backend(
        settings=settings(tmp_path),
        submit=pipe.submit,
        replies=pipe.replies,
        store=store,
        ready=lambda: True,
        rollouts=rollouts,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(create_app(backend)), base_url="http://gw")


def answer(env: Envelope, text: str) -> Envelope:
    out = Envelope()
    out.CopyFrom(env)
    out.response.choices.append(Choice(index=0, text=text, finish_reason="stop"))
    return out


def asked(env: Envelope) -> str:
    return env.request.messages[0].content


async def test_same_async_request_id_and_idempotency_key_from_two_tenants(tmp_path: Path) -> None:
    pipe = Pipeline()
    store = SqliteResultStore(tmp_path / "results.sqlite")
    async with gateway(tmp_path, pipe, store, RolloutStore(tmp_path / "ro.sqlite")) as http:

        async def post(auth: dict[str, str], content: str, **how: str) -> dict:
            body = {"body": {"model": "sy-tiny", "messages": [{"role": "user", "content": content}]}}
            headers = dict(auth)
            if "request_id" in how:
                body["request_id"] = how["request_id"]
            if "key" in how:
                headers["Idempotency-Key"] = how["key"]
            r = await http.post("/v1/requests", json=body, headers=headers)
            assert r.status_code == 202, r.text
            return r.json()

        # The same client id in the body, then in the header, at the same time from both tenants.
        by_body = await asyncio.gather(
            post(A, "Repeat: amber", request_id="job-1"), post(B, "Repeat: frost", request_id="job-1")
        )
        by_key = await asyncio.gather(
            post(A, "Repeat: delta", key="k-1"), post(B, "Repeat: pixel", key="k-1")
        )
        ids = [x["id"] for x in (*by_body, *by_key)]
        assert len(set(ids)) == 4, ids  # four jobs
        # The ids on the wire are the gateway's own: the two tenants' records never share one.
        assert sorted(e.request_id for e in pipe.submitted) == sorted(ids)
        assert {(e.tenant, asked(e)) for e in pipe.submitted} == {
            ("tenant-a", "Repeat: amber"),
            ("tenant-b", "Repeat: frost"),
            ("tenant-a", "Repeat: delta"),
            ("tenant-b", "Repeat: pixel"),
        }
        # Each tenant's retry is its own job again, and nothing more is sent.
        assert (await post(A, "Repeat: amber", request_id="job-1"))["id"] == by_body[0]["id"]
        assert (await post(B, "Repeat: frost", request_id="job-1"))["id"] == by_body[1]["id"]
        assert (await post(B, "Repeat: pixel", key="k-1"))["id"] == by_key[1]["id"]
        assert len(pipe.submitted) == 4

        # The reply reader (gateway/reader.py) records each answer under its own tenant.
        for env in pipe.submitted:
            reply = answer(env, asked(env).split()[-1])
            assert await store.pending([(reply.request_id, reply.tenant)])
            assert await store.finish(reply.request_id, reply.tenant, *async_result(reply))
        for auth, job, word in (
            (A, by_body[0], "amber"),
            (B, by_body[1], "frost"),
            (A, by_key[0], "delta"),
            (B, by_key[1], "pixel"),
        ):
            got = (await http.get(f"/v1/requests/{job['id']}", headers=auth)).json()
            assert got["status"] == "completed", got
            assert got["result"]["choices"][0]["message"]["content"] == word
        # Another tenant's job is not found.
        assert (await http.get(f"/v1/requests/{by_body[0]['id']}", headers=B)).status_code == 404


def rollout(words: list[str]) -> dict:
    return {
        "policy": {"model": "sy-tiny"},
        "prompts": [{"messages": [{"role": "user", "content": f"Repeat: {w}"}]} for w in words],
        "n": 2,
        "sampling": {"temperature": 0.5, "top_k": 1, "max_tokens": 8},
        "reward": {"functions": [{"name": "task_check"}]},
        "rollout_id": "shared-step",
    }


async def test_same_rollout_id_from_two_tenants_is_two_jobs(tmp_path: Path) -> None:
    pipe = Pipeline()
    s = settings(tmp_path)
    rollouts = RolloutStore(store_path(s))
    async with gateway(tmp_path, pipe, SqliteResultStore(tmp_path / "results.sqlite"), rollouts) as http:
        ra, rb = await asyncio.gather(
            http.post("/v1/rollouts", json=rollout(["amber", "cabin"]), headers=A),
            http.post("/v1/rollouts", json=rollout(["frost"]), headers=B),
        )
        assert ra.status_code == rb.status_code == 202, (ra.text, rb.text)
        assert ra.json()["id"] == rb.json()["id"] == "ro-shared-step"
        assert (ra.json()["num_groups"], rb.json()["num_groups"]) == (2, 1)
        # Both jobs went out, each under its tenant (the old bug: both 202, one job ever finished).
        assert sorted((e.tenant, e.rollout.rollout_id, e.kind) for e in pipe.submitted) == [
            ("tenant-a", "ro-shared-step", Kind.KIND_ROLLOUT),
            ("tenant-b", "ro-shared-step", Kind.KIND_ROLLOUT),
        ]
        # A tenant's retry is the same job: nothing is sent again.
        again = await http.post("/v1/rollouts", json=rollout(["amber", "cabin"]), headers=A)
        assert again.status_code == 202 and again.json()["num_groups"] == 2
        assert len(pipe.submitted) == 2
        # The long poll of one tenant wakes for its own records only.
        waiting = asyncio.create_task(
            http.get("/v1/rollouts/ro-shared-step", params={"wait": 5, "samples": False}, headers=B)
        )
        await asyncio.sleep(0.2)
        group = Envelope(
            request_id="ro-shared-step:g0", tenant="tenant-a", kind=Kind.KIND_ROLLOUT, model="sy-tiny"
        )
        group.rollout.rollout_id, group.rollout.num_groups, group.rollout.group_size = "ro-shared-step", 2, 2
        group.rollout.group.SetInParent()
        rollouts.add_many([group])
        rollouts.notify({("tenant-a", "ro-shared-step")})
        await asyncio.sleep(0.2)
        assert not waiting.done()  # tenant-a's group is not tenant-b's news
        other = Envelope()
        other.CopyFrom(group)
        other.tenant = "tenant-b"
        other.rollout.num_groups = 1
        rollouts.add_many([other])
        rollouts.notify({("tenant-b", "ro-shared-step")})
        got = (await asyncio.wait_for(waiting, 5)).json()
        assert got["status"] == "completed" and got["num_groups"] == 1
        a = (await http.get("/v1/rollouts/ro-shared-step", headers=A)).json()
        assert a["status"] == "in_progress" and a["counts"]["groups_completed"] == 1


def batch_file(words: list[str]) -> bytes:
    rows = [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": CHAT,
            "body": {"model": "sy-tiny", "messages": [{"role": "user", "content": f"Repeat: {w}"}]},
        }
        for i, w in enumerate(words)
    ]
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


async def test_identical_batch_inputs_from_two_tenants_get_their_own_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """File and batch ids are the server's (random), so they cannot collide; the per-line request
    ids derive from the batch id, and the collected answers are read back per tenant: a record
    claiming another tenant's batch (a Kafka producer) is never one of its answers."""
    monkeypatch.setattr("services.batch.job.REFRESH_S", 0.02)
    store = BatchStore(LocalStore(tmp_path / "objects"))
    collector = Collector(store, "test", window_s=0.01)
    stop = asyncio.Event()
    running = asyncio.create_task(collector.run(stop))
    s = Settings(var_dir=tmp_path, batch_lease_s=2, batch_max_in_flight=8)
    data = batch_file(["amber", "frost", "delta"])  # the very same bytes from both tenants
    sent: list[Envelope] = []

    async def publish(envs: list[Envelope]) -> None:
        loop = asyncio.get_running_loop()
        for env in envs:
            sent.append(env)
            loop.create_task(collector.handle(answer(env, f"{env.tenant}:{asked(env).split()[-1]}")))
            forged = answer(env, "forged")
            forged.tenant = "tenant-b" if env.tenant == "tenant-a" else "tenant-a"
            loop.create_task(collector.handle(forged))  # the other tenant, same batch and line ids

    async def known(tenant: str, model: str) -> bool:
        return model == "sy-tiny"

    async def run(tenant: str) -> BatchObject:
        f = await store.put_file(tenant, "input.jsonl", "batch", data)
        now = int(time.time())
        b = BatchObject(
            id=new_batch_id(), endpoint=CHAT, input_file_id=f.id, completion_window="24h", created_at=now
        )
        await store.put_batch(tenant, b)
        assert await BatchJob(s, store, publish, known).run(tenant, b.id) == "completed"
        return await store.get_batch(tenant, b.id)  # type: ignore[return-value]

    try:
        ba, bb = await asyncio.gather(run("tenant-a"), run("tenant-b"))
    finally:
        stop.set()
        await running
    assert ba.id != bb.id and ba.input_file_id != bb.input_file_id
    assert len({e.request_id for e in sent}) == 6  # no line of one is a line of the other
    for tenant, b in (("tenant-a", ba), ("tenant-b", bb)):
        assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (3, 3, 0)
        out = read_jsonl(await store.file_content(tenant, b.output_file_id) or b"")
        got = {r["custom_id"]: r["response"]["body"]["choices"][0]["message"]["content"] for r in out}
        assert got == {"line-0": f"{tenant}:amber", "line-1": f"{tenant}:frost", "line-2": f"{tenant}:delta"}
        # The other tenant reads none of it.
        other = "tenant-b" if tenant == "tenant-a" else "tenant-a"
        assert await store.get_batch(other, b.id) is None
        assert await store.file_content(other, b.output_file_id) is None  # type: ignore[arg-type]


def test_cache_write_back_dedupe_is_per_tenant() -> None:
    """The entry a response writes is keyed by (tenant, request id): one tenant's answer under an
    id never counts as the other's `duplicate`, and a redelivery of the same tenant's does."""
    assert entry_id("tenant-a", "job-1") != entry_id("tenant-b", "job-1")
    assert entry_id("tenant-a", "job-1") == entry_id("tenant-a", "job-1")
