"""The accepted log in one SQLite file of this replica: a single gateway with no Redis."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from .store import QueueFull, Stale, view


class SqliteResultStore:
    """The accepted log in one SQLite file of this replica (no Redis configured)."""

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
            cols = {r[1] for r in self._db.execute("PRAGMA table_info(requests)")}
            for col, decl in (
                ("payload", "BLOB"),
                ("attempts", "INTEGER NOT NULL DEFAULT 0"),
                ("submitted", "REAL"),
            ):
                if col not in cols:
                    self._db.execute(f"ALTER TABLE requests ADD COLUMN {col} {decl}")

    def _one(self, sql: str, args: tuple[Any, ...]) -> Any:
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    async def accept(
        self,
        request_id: str,
        tenant: str,
        endpoint: str,
        idem_key: str | None,
        payload: bytes | None,
        max_queued: int,
    ) -> tuple[str, bool]:
        with self._lock:
            if idem_key is not None:
                row = self._db.execute(
                    "SELECT request_id FROM requests WHERE tenant=? AND idem_key=?", (tenant, idem_key)
                ).fetchone()
                if row:
                    return row[0], False
            if self._db.execute("SELECT 1 FROM requests WHERE request_id=?", (request_id,)).fetchone():
                return request_id, False
            (n,) = self._db.execute(
                "SELECT COUNT(*) FROM requests WHERE tenant=? AND status='queued'", (tenant,)
            ).fetchone()
            if n >= max_queued:
                raise QueueFull(tenant)
            self._db.execute(
                "INSERT INTO requests (request_id, tenant, idem_key, endpoint, status, created, payload) "
                "VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                (request_id, tenant, idem_key, endpoint, time.time(), payload),
            )
            return request_id, True

    async def existing(self, tenant: str, idem_key: str) -> str | None:
        row = self._one("SELECT request_id FROM requests WHERE tenant=? AND idem_key=?", (tenant, idem_key))
        return row[0] if row else None

    async def submitted(self, request_id: str, tenant: str) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE requests SET attempts=attempts+1, submitted=? WHERE request_id=? AND tenant=? "
                "AND status='queued'",
                (time.time(), request_id, tenant),
            )

    async def forget(self, request_id: str, tenant: str) -> None:
        with self._lock:
            self._db.execute(
                "DELETE FROM requests WHERE request_id=? AND tenant=? AND status='queued'",
                (request_id, tenant),
            )

    async def claim_stale(self, older_than_s: float, limit: int = 100) -> list[Stale]:
        now = time.time()
        with self._lock:
            rows = self._db.execute(
                "SELECT request_id, tenant, payload, attempts FROM requests "
                "WHERE status='queued' AND COALESCE(submitted, created) <= ? LIMIT ?",
                (now - older_than_s, limit),
            ).fetchall()
            self._db.executemany(
                "UPDATE requests SET attempts=attempts+1, submitted=? WHERE request_id=?",
                [(now, r[0]) for r in rows],
            )
        return [Stale(r[0], r[1], r[2], int(r[3])) for r in rows]

    async def pending(self, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        out = set()
        for rid, tenant in keys:
            row = self._one("SELECT status FROM requests WHERE request_id=? AND tenant=?", (rid, tenant))
            if row and row[0] == "queued":
                out.add((rid, tenant))
        return out

    async def finish(self, request_id: str, tenant: str, status: str, result: dict[str, Any]) -> bool:
        with self._lock:
            cur = self._db.execute(
                "UPDATE requests SET status=?, finished=?, result=?, payload=NULL "
                "WHERE request_id=? AND tenant=? AND status='queued'",
                (status, time.time(), json.dumps(result), request_id, tenant),
            )
            return cur.rowcount > 0

    async def get(self, request_id: str, tenant: str) -> dict[str, Any] | None:
        cols = "request_id, endpoint, status, created, finished, result"
        row = self._one(f"SELECT {cols} FROM requests WHERE request_id=? AND tenant=?", (request_id, tenant))
        if row is None:  # the client's own request_id (kept as its idempotency key)
            row = self._one(
                f"SELECT {cols} FROM requests WHERE idem_key=? AND tenant=?", (request_id, tenant)
            )
        if row is None:
            return None
        rid, endpoint, status, created, finished, result = row
        return view(
            rid,
            {
                "endpoint": endpoint,
                "status": status,
                "created": created,
                "finished": finished,
                "result": result,
            },
        )

    async def queued(self, tenant: str) -> int:
        (n,) = self._one("SELECT COUNT(*) FROM requests WHERE tenant=? AND status='queued'", (tenant,))
        return int(n)

    async def expire(self, older_than_s: float) -> int:
        with self._lock:
            cur = self._db.execute("DELETE FROM requests WHERE created < ?", (time.time() - older_than_s,))
            return cur.rowcount

    async def save_offsets(self, instance: str, offsets: dict[tuple[str, int], int]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)",
                [(t, p, o) for (t, p), o in offsets.items()],
            )

    async def offsets(self, instance: str) -> dict[tuple[str, int], int]:
        with self._lock:
            return {(t, p): o for t, p, o in self._db.execute("SELECT topic, partition, next FROM offsets")}

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        await asyncio.to_thread(self._db.close)
