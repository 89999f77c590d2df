"""Getting replies back to the connection that waits for them, and keeping async results.

Mechanism (DESIGN §4 "replies reach the gateway instance that holds the connection"): every
gateway instance reads sy.responses and sy.stream in full without a consumer group and keeps
only the records of requests it has in flight (`ReplyRouter`). No routing state is shared, an
instance can die without stranding other instances' replies, and the cost grows with the number
of instances times the reply volume, which suits a handful of gateway replicas. Async results
are persisted (`ResultStore`, SQLite) together with the reader's offsets, so a restarted
gateway resumes reading where it stopped and still records results that arrived meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from switchyard.v1.events_pb2 import StreamDelta

from shared.runtime.envelope import Envelope


@dataclass
class Waiter:
    tenant: str
    final: asyncio.Future[Envelope]
    deltas: asyncio.Queue[StreamDelta] | None = None
    received_ns: int = 0  # when the final response was read off the topic
    sent_ns: int = 0  # when its producer sent it


@dataclass
class ReplyRouter:
    waiters: dict[str, Waiter] = field(default_factory=dict)
    duplicates: int = 0

    def register(self, request_id: str, tenant: str, stream: bool) -> Waiter:
        loop = asyncio.get_running_loop()
        w = Waiter(tenant, loop.create_future(), asyncio.Queue() if stream else None)
        self.waiters[request_id] = w
        return w

    def release(self, request_id: str) -> None:
        self.waiters.pop(request_id, None)

    def on_response(self, env: Envelope, sent_ns: int) -> bool:
        w = self.waiters.get(env.request_id)
        if w is None or w.tenant != env.tenant:
            return False
        if w.final.done():
            self.duplicates += 1  # a redelivered request answered twice: the first answer wins
            return False
        w.received_ns, w.sent_ns = time.time_ns(), sent_ns
        w.final.set_result(env)
        return True

    def on_delta(self, delta: StreamDelta) -> None:
        w = self.waiters.get(delta.request_id)
        if w is not None and w.deltas is not None and w.tenant == delta.tenant and not w.final.done():
            w.deltas.put_nowait(delta)


class ResultStore:
    """Async requests and their results, plus the reply reader's offsets (SQLite, one file)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._lock = threading.Lock()
        with self._lock:
            self._db.executescript(
                """
                CREATE TABLE IF NOT EXISTS requests (
                    request_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, idem_key TEXT, endpoint TEXT NOT NULL,
                    status TEXT NOT NULL, created REAL NOT NULL, finished REAL, result TEXT);
                CREATE UNIQUE INDEX IF NOT EXISTS idem ON requests(tenant, idem_key) WHERE idem_key IS NOT NULL;
                CREATE INDEX IF NOT EXISTS queued ON requests(tenant) WHERE status='queued';
                CREATE TABLE IF NOT EXISTS offsets (topic TEXT, partition INTEGER, next INTEGER,
                    PRIMARY KEY (topic, partition));
                """
            )
            # The accepted log: the envelope as submitted, so a request the pipeline lost (a
            # crashed gateway before its record was acked, a broker that restarted empty) is sent
            # again, or reported failed after `attempts` sends; never silently lost.
            cols = {r[1] for r in self._db.execute("PRAGMA table_info(requests)")}
            for col, decl in (
                ("payload", "BLOB"),
                ("attempts", "INTEGER NOT NULL DEFAULT 0"),
                ("submitted", "REAL"),
            ):
                if col not in cols:
                    self._db.execute(f"ALTER TABLE requests ADD COLUMN {col} {decl}")

    def accept(
        self, request_id: str, tenant: str, endpoint: str, idem_key: str | None, payload: bytes | None = None
    ) -> tuple[str, bool]:
        """Record an async request; an idempotency key seen before returns the existing id (False)."""
        with self._lock:
            if idem_key is not None:
                row = self._db.execute(
                    "SELECT request_id FROM requests WHERE tenant=? AND idem_key=?", (tenant, idem_key)
                ).fetchone()
                if row:
                    return row[0], False
            self._db.execute(
                "INSERT INTO requests (request_id, tenant, idem_key, endpoint, status, created, payload) "
                "VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                (request_id, tenant, idem_key, endpoint, time.time(), payload),
            )
            return request_id, True

    def has_key(self, tenant: str, idem_key: str) -> bool:
        """The tenant already sent a request with this idempotency key (a retry)."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM requests WHERE tenant=? AND idem_key=?", (tenant, idem_key)
            ).fetchone()
        return row is not None

    def queued(self, tenant: str) -> int:
        """The tenant's async requests not answered yet (its quota of queued work)."""
        with self._lock:
            (n,) = self._db.execute(
                "SELECT COUNT(*) FROM requests WHERE tenant=? AND status='queued'", (tenant,)
            ).fetchone()
        return int(n)

    def submitted(self, request_id: str) -> None:
        """Its record is on the ingest topic (acked): one more send counted."""
        with self._lock:
            self._db.execute(
                "UPDATE requests SET attempts=attempts+1, submitted=? WHERE request_id=?",
                (time.time(), request_id),
            )

    def stale(self, older_than_s: float) -> list[tuple[str, str, bytes | None, int]]:
        """Queued requests with no answer this long after their last send (or acceptance)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT request_id, tenant, payload, attempts FROM requests "
                "WHERE status='queued' AND COALESCE(submitted, created) < ?",
                (time.time() - older_than_s,),
            ).fetchall()
        return [(r[0], r[1], r[2], int(r[3])) for r in rows]

    def forget(self, request_id: str) -> None:
        """Drop a request that never reached the topic, so a retry with its key submits it again."""
        with self._lock:
            self._db.execute("DELETE FROM requests WHERE request_id=? AND status='queued'", (request_id,))

    def is_pending(self, request_id: str, tenant: str) -> bool:
        """Queued and this tenant's: a record of another tenant under the same id is not its answer."""
        with self._lock:
            row = self._db.execute(
                "SELECT status FROM requests WHERE request_id=? AND tenant=?", (request_id, tenant)
            ).fetchone()
        return bool(row) and row[0] == "queued"

    def finish(self, request_id: str, tenant: str, status: str, result: dict[str, Any]) -> bool:
        with self._lock:
            cur = self._db.execute(
                "UPDATE requests SET status=?, finished=?, result=? WHERE request_id=? AND tenant=? AND status='queued'",
                (status, time.time(), json.dumps(result), request_id, tenant),
            )
            return cur.rowcount > 0

    def get(self, request_id: str, tenant: str) -> dict[str, Any] | None:
        """A tenant sees only its own requests; another tenant's id reads as not found."""
        with self._lock:
            row = self._db.execute(
                "SELECT request_id, endpoint, status, created, finished, result FROM requests "
                "WHERE request_id=? AND tenant=?",
                (request_id, tenant),
            ).fetchone()
        if row is None:
            return None
        rid, endpoint, status, created, finished, result = row
        return {
            "id": rid,
            "object": "request",
            "endpoint": endpoint,
            "status": status,
            "created": created,
            "finished": finished,
            **(json.loads(result) if result else {}),
        }

    def expire(self, older_than_s: float) -> int:
        with self._lock:
            cur = self._db.execute("DELETE FROM requests WHERE created < ?", (time.time() - older_than_s,))
            return cur.rowcount

    def save_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)",
                [(t, p, o) for (t, p), o in offsets.items()],
            )

    def offsets(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return {(t, p): o for t, p, o in self._db.execute("SELECT topic, partition, next FROM offsets")}
