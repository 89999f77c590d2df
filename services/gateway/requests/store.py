"""The accepted log of async requests: their state, results, idempotency keys and queue quota.

Two stores behind one async interface (`ResultStore`):
- `RedisResultStore` (redis_store.py; SY_GATEWAY_STATE_URL=redis://…, what `make run` and the production
  manifests use): one store shared by every gateway replica, so a GET or a retry reaches its
  request on any replica. Each change is one Lua script, so two replicas never both accept a
  key, both pass a quota or both resend a stale request.
- `SqliteResultStore` (sqlite_store.py; SY_GATEWAY_STATE_URL unset): one file per replica, for a single gateway
  with no Redis; a second replica would not see its requests.

A request is queued until its first answer (the first answer wins: later ones from a resend or
another replica are ignored). The payload (the envelope as submitted) is kept while queued so a
request the pipeline lost is sent again (`claim_stale`) or reported failed after
SY_GATEWAY_RESUBMIT_MAX sends. Requests are the tenant's own: another tenant's id, or its
idempotency key, reads as not found. A request is found by the id the gateway gave it or by the
client's own `request_id` / Idempotency-Key.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Protocol

from redis.exceptions import RedisError

from shared.runtime.config import Settings

# What a store raises when it cannot answer (Redis down or timing out, a locked SQLite file).
STORE_ERRORS: tuple[type[Exception], ...] = (RedisError, sqlite3.OperationalError, OSError)


class QueueFull(Exception):
    """The tenant has SY_TENANT_MAX_QUEUED async requests unanswered."""


@dataclass(frozen=True)
class Stale:
    """A queued request with no answer long after its last send, claimed for one more send."""

    request_id: str
    tenant: str
    payload: bytes | None
    sends: int  # sends before this claim


class ResultStore(Protocol):
    async def accept(
        self,
        request_id: str,
        tenant: str,
        endpoint: str,
        idem_key: str | None,
        payload: bytes | None,
        max_queued: int,
    ) -> tuple[str, bool]:
        """Record a request; (existing id, False) for a key seen before; QueueFull past the quota."""

    async def existing(self, tenant: str, idem_key: str) -> str | None:
        """The id of the tenant's request sent with this idempotency key (a retry), if any."""

    async def submitted(self, request_id: str, tenant: str) -> None:
        """Its record is on the ingest topic (acked): one send counted."""

    async def forget(self, request_id: str, tenant: str) -> None:
        """Drop a queued request that never reached the topic, so a retry submits it again."""

    async def claim_stale(self, older_than_s: float, limit: int = 100) -> list[Stale]:
        """Queued requests unanswered this long after their last send, each claimed by one caller
        (its send counted now); a request with no payload or out of sends is the caller's to fail."""

    async def pending(self, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (request_id, tenant) pairs are queued async requests (one round trip)."""

    async def finish(self, request_id: str, tenant: str, status: str, result: dict[str, Any]) -> bool:
        """Store the first answer of a queued request; False when it was not queued (or not the tenant's)."""

    async def get(self, request_id: str, tenant: str) -> dict[str, Any] | None:
        """The tenant's request by its id or by the client's own request_id / idempotency key."""

    async def queued(self, tenant: str) -> int:
        """The tenant's async requests not answered yet."""

    async def expire(self, older_than_s: float) -> int:
        """Drop requests accepted longer ago than this."""

    async def save_offsets(self, instance: str, offsets: dict[tuple[str, int], int]) -> None:
        """Where this replica's reply reader is (it resumes there after a restart)."""

    async def offsets(self, instance: str) -> dict[tuple[str, int], int]: ...

    async def close(self) -> None: ...


def view(request_id: str, row: dict[str, Any]) -> dict[str, Any]:
    """What GET /v1/requests/{id} shows."""
    finished = row.get("finished")
    return {
        "id": request_id,
        "object": "request",
        "endpoint": row["endpoint"],
        "status": row["status"],
        "created": float(row["created"]),
        "finished": float(finished) if finished not in (None, "") else None,
        **(json.loads(row["result"]) if row.get("result") else {}),
    }


def open_result_store(settings: Settings) -> ResultStore:
    """Redis when SY_GATEWAY_STATE_URL names one (shared by replicas), else this replica's SQLite file."""
    if settings.gateway_state_url:
        from .redis_store import RedisResultStore

        return RedisResultStore(settings.gateway_state_url, ttl_s=settings.gateway_results_ttl_s)
    from .sqlite_store import SqliteResultStore

    return SqliteResultStore(settings.var_dir / "gateway" / f"{settings.instance_id}.sqlite")
