"""The gateway's accepted log: what is sent again, when, and what is reported failed."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from services.gateway.replies import ResultStore


def test_unanswered_requests_come_back_for_resubmission_until_answered(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "r.sqlite")
    store.accept("a", "acme", "/v1/chat/completions", "k1", b"payload-a")
    store.accept("b", "acme", "/v1/chat/completions", None, b"payload-b")
    assert store.accept("x", "acme", "/v1/chat/completions", "k1", b"other") == ("a", False)  # idempotent
    store.submitted("a")
    assert store.stale(3600) == []
    time.sleep(0.05)
    assert sorted(store.stale(0.01)) == [("a", "acme", b"payload-a", 1), ("b", "acme", b"payload-b", 0)]
    store.submitted("a")
    assert ("a", "acme", b"payload-a", 2) in store.stale(0)
    assert store.finish("a", "acme", "completed", {"x": 1})
    assert not store.finish("a", "acme", "failed", {})  # the first answer wins: one result per id
    assert [r[0] for r in store.stale(0)] == ["b"]
    assert store.get("a", "acme")["status"] == "completed"  # type: ignore[index]


def test_a_log_from_before_payloads_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        """CREATE TABLE requests (request_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, idem_key TEXT,
        endpoint TEXT NOT NULL, status TEXT NOT NULL, created REAL NOT NULL, finished REAL, result TEXT);
        INSERT INTO requests VALUES ('old', 'acme', NULL, '/v1/completions', 'queued', 0, NULL, NULL);"""
    )
    db.close()
    store = ResultStore(path)
    assert store.stale(1) == [("old", "acme", None, 0)]  # no payload: the gateway reports it failed


def test_two_tenants_with_the_same_idempotency_key_get_their_own_requests(tmp_path: Path) -> None:
    """DESIGN §6: the client's key (request_id / Idempotency-Key) is scoped by tenant; the id on
    the wire is the gateway's own, so the pipeline never sees the two tenants' keys."""
    store = ResultStore(tmp_path / "r.sqlite")
    assert store.accept("gw-a", "tenant-a", "/v1/chat/completions", "job-1", b"a") == ("gw-a", True)
    assert store.accept("gw-b", "tenant-b", "/v1/chat/completions", "job-1", b"b") == ("gw-b", True)
    # Each tenant's retry with the key returns its own request, not the other's.
    assert store.accept("gw-a2", "tenant-a", "/v1/chat/completions", "job-1", b"a2") == ("gw-a", False)
    assert store.accept("gw-b2", "tenant-b", "/v1/chat/completions", "job-1", b"b2") == ("gw-b", False)
    # An answer is pending only for the tenant that owns the id (a record claiming the id under
    # another tenant is not its answer) and is recorded only there.
    assert store.is_pending("gw-a", "tenant-a") and not store.is_pending("gw-a", "tenant-b")
    assert not store.finish("gw-a", "tenant-b", "completed", {"result": "forged"})
    assert store.finish("gw-a", "tenant-a", "completed", {"result": "a"})
    assert store.finish("gw-b", "tenant-b", "completed", {"result": "b"})
    assert store.get("gw-a", "tenant-a")["result"] == "a"  # type: ignore[index]
    assert store.get("gw-b", "tenant-b")["result"] == "b"  # type: ignore[index]
    assert store.get("gw-a", "tenant-b") is None and store.get("gw-b", "tenant-a") is None
