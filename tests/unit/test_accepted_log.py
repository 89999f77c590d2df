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
