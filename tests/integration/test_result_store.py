"""The gateway's accepted log (services/gateway/requests/store.py), on SQLite and on a real Redis.

The same contract holds for both; the Redis store is also shared by several replicas, so two
store objects on one Redis stand for two gateway replicas.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from services.gateway.requests.redis_store import RedisResultStore
from services.gateway.requests.sqlite_store import SqliteResultStore
from services.gateway.requests.store import QueueFull, ResultStore, Stale
from tests.helpers.redis import redis_server

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest_asyncio.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> AsyncIterator[ResultStore]:
    if request.param == "sqlite":
        s: ResultStore = SqliteResultStore(tmp_path / "r.sqlite")
    else:
        s = RedisResultStore(redis_url)
        await s._r.flushdb()  # type: ignore[attr-defined]
    yield s
    await s.close()


async def test_unanswered_requests_come_back_for_resubmission_until_answered(store: ResultStore) -> None:
    await store.accept("a", "acme", CHAT, "k1", b"payload-a", 100)
    await store.accept("b", "acme", CHAT, None, b"payload-b", 100)
    assert await store.accept("x", "acme", CHAT, "k1", b"other", 100) == ("a", False)  # idempotent
    await store.submitted("a", "acme")
    assert await store.claim_stale(3600) == []
    await asyncio.sleep(0.05)
    claimed = sorted(await store.claim_stale(0.01), key=lambda s: s.request_id)
    assert claimed == [Stale("a", "acme", b"payload-a", 1), Stale("b", "acme", b"payload-b", 0)]
    # A claim counts the send and moves the request's clock: nobody claims it again at once.
    assert await store.claim_stale(0.5) == []
    await asyncio.sleep(0.02)
    assert Stale("a", "acme", b"payload-a", 2) in await store.claim_stale(0)
    assert await store.finish("a", "acme", "completed", {"x": 1})
    assert not await store.finish("a", "acme", "failed", {})  # the first answer wins
    assert [s.request_id for s in await store.claim_stale(0)] == ["b"]
    got = await store.get("a", "acme")
    assert got is not None and got["status"] == "completed" and got["x"] == 1 and got["finished"]


async def test_two_tenants_with_the_same_idempotency_key_get_their_own_requests(store: ResultStore) -> None:
    """DESIGN §6: the client's key is scoped by tenant; the id on the wire is the gateway's own."""
    assert await store.accept("gw-a", "tenant-a", CHAT, "job-1", b"a", 100) == ("gw-a", True)
    assert await store.accept("gw-b", "tenant-b", CHAT, "job-1", b"b", 100) == ("gw-b", True)
    assert await store.accept("gw-a2", "tenant-a", CHAT, "job-1", b"a2", 100) == ("gw-a", False)
    assert await store.accept("gw-b2", "tenant-b", CHAT, "job-1", b"b2", 100) == ("gw-b", False)
    assert await store.existing("tenant-a", "job-1") == "gw-a"
    assert await store.existing("tenant-c", "job-1") is None
    # Pending, and recorded, only for the tenant that owns the id.
    assert await store.pending([("gw-a", "tenant-a"), ("gw-a", "tenant-b")]) == {("gw-a", "tenant-a")}
    assert not await store.finish("gw-a", "tenant-b", "completed", {"result": "forged"})
    assert await store.finish("gw-a", "tenant-a", "completed", {"result": "a"})
    assert await store.finish("gw-b", "tenant-b", "completed", {"result": "b"})
    assert (await store.get("gw-a", "tenant-a"))["result"] == "a"  # type: ignore[index]
    assert (await store.get("gw-b", "tenant-b"))["result"] == "b"  # type: ignore[index]
    assert await store.get("gw-a", "tenant-b") is None and await store.get("gw-b", "tenant-a") is None


async def test_a_request_is_found_by_the_clients_own_request_id(store: ResultStore) -> None:
    await store.accept("gw-1", "acme", CHAT, "my-job-7", b"p", 100)
    by_own = await store.get("my-job-7", "acme")
    assert by_own is not None and by_own["id"] == "gw-1"
    assert await store.get("my-job-7", "other") is None  # another tenant's key: not found
    assert await store.get("nope", "acme") is None


async def test_the_queue_quota_counts_only_unanswered_requests(store: ResultStore) -> None:
    for i in range(3):
        await store.accept(f"r{i}", "acme", CHAT, None, b"p", 3)
    with pytest.raises(QueueFull):
        await store.accept("r3", "acme", CHAT, None, b"p", 3)
    assert await store.queued("acme") == 3 and await store.queued("other") == 0
    await store.accept("o1", "other", CHAT, None, b"p", 3)  # another tenant's quota is its own
    # A retry of an accepted key is never refused by the quota.
    await store.finish("r0", "acme", "completed", {})
    await store.accept("r4", "acme", CHAT, "key", b"p", 3)
    assert await store.accept("r5", "acme", CHAT, "key", b"p", 3) == ("r4", False)
    assert await store.queued("acme") == 3


async def test_forget_lets_a_retry_submit_again(store: ResultStore) -> None:
    await store.accept("f1", "acme", CHAT, "k", b"p", 10)
    await store.forget("f1", "acme")
    assert await store.get("f1", "acme") is None and await store.queued("acme") == 0
    assert await store.accept("f2", "acme", CHAT, "k", b"p", 10) == ("f2", True)
    await store.finish("f2", "acme", "completed", {})
    await store.forget("f2", "acme")  # an answered request is never forgotten
    assert (await store.get("f2", "acme"))["status"] == "completed"  # type: ignore[index]


async def test_offsets_are_kept_per_replica(store: ResultStore) -> None:
    await store.save_offsets("gw-1", {("sy.responses", 0): 12, ("sy.responses", 3): 4})
    await store.save_offsets("gw-1", {("sy.responses", 0): 15})
    assert await store.offsets("gw-1") == {("sy.responses", 0): 15, ("sy.responses", 3): 4}
    if isinstance(store, RedisResultStore):  # a new replica resumes where the latest one was
        await store.save_offsets("gw-3", {("sy.responses", 0): 20})
        assert await store.offsets("gw-2") == {("sy.responses", 0): 20, ("sy.responses", 3): 4}
        assert await store.offsets("gw-1") == {("sy.responses", 0): 15, ("sy.responses", 3): 4}


async def test_two_replicas_on_one_redis_share_requests_keys_quota_and_claims(redis_url: str) -> None:
    a, b = RedisResultStore(redis_url), RedisResultStore(redis_url)
    await a._r.flushdb()
    try:
        # Submitted on A, read and retried on B.
        assert await a.accept("gw-1", "acme", CHAT, "job", b"p", 2) == ("gw-1", True)
        assert (await b.get("job", "acme"))["id"] == "gw-1"  # type: ignore[index]
        assert await b.accept("gw-2", "acme", CHAT, "job", b"p", 2) == ("gw-1", False)
        # Concurrent accepts on both replicas never pass the quota together.
        results = await asyncio.gather(
            *[(a if i % 2 else b).accept(f"c{i}", "acme", CHAT, None, b"p", 2) for i in range(8)],
            return_exceptions=True,
        )
        assert sum(not isinstance(r, Exception) for r in results) == 1
        assert all(isinstance(r, QueueFull) for r in results if isinstance(r, Exception))
        # A stale request is claimed by one replica only.
        await asyncio.sleep(0.6)
        ca, cb = await asyncio.gather(a.claim_stale(0.5), b.claim_stale(0.5))
        accepted = next(r for r in results if not isinstance(r, Exception))[0]
        assert sorted(s.request_id for s in ca + cb) == sorted(["gw-1", accepted])  # once each
        # The answer read by B finishes A's request once.
        assert await b.finish("gw-1", "acme", "completed", {"result": 1})
        assert not await a.finish("gw-1", "acme", "completed", {"result": 2})
        assert (await a.get("gw-1", "acme"))["result"] == 1  # type: ignore[index]
    finally:
        await a.close()
        await b.close()


def test_a_log_from_before_payloads_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        """CREATE TABLE requests (request_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, idem_key TEXT,
        endpoint TEXT NOT NULL, status TEXT NOT NULL, created REAL NOT NULL, finished REAL, result TEXT);
        INSERT INTO requests VALUES ('old', 'acme', NULL, '/v1/completions', 'queued', 0, NULL, NULL);"""
    )
    db.close()
    store = SqliteResultStore(path)
    # No payload: the gateway reports it failed.
    assert asyncio.run(store.claim_stale(1)) == [Stale("old", "acme", None, 0)]


async def test_a_redis_that_is_down_raises_a_store_error_quickly() -> None:
    from services.gateway.requests.store import STORE_ERRORS
    from shared.runtime.procs import free_port

    s = RedisResultStore(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(STORE_ERRORS):
        await s.get("x", "acme")
    await s.close()
