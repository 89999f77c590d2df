"""Requests the router sent to a pool and no answer has come for yet (fail-over bookkeeping).

The router follows sy.responses and forgets a request once any response for it appears. When a
pool goes down (every worker's heartbeat stale), its pending requests are routed again to a
live pool; a late answer from the old pool is then a duplicate, which readers drop by request id.
Kept in memory, bounded: a restarted router cannot fail over what it sent before the restart
(those requests wait in the pool's topic until a worker of that pool comes back).

Keyed by (tenant, request id): a request id can be a client's (a Kafka producer's, or a rollout's
group `ro-<rollout_id>:g<i>`), so two tenants may have the same one in flight (DESIGN §6): one's
answer must not clear the other's entry, nor one's send replace the other's.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class Pending:
    pool: str
    envelope: bytes  # as routed (protobuf), so a fail-over resends exactly that request
    sent: float
    failovers: int = 0


class PendingTable:
    def __init__(self, max_entries: int, ttl_s: float) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._items: OrderedDict[tuple[str, str], Pending] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def add(
        self,
        tenant: str,
        request_id: str,
        pool: str,
        envelope: bytes,
        now: float | None = None,
        failovers: int = 0,
    ) -> None:
        key = (tenant, request_id)
        self._items.pop(key, None)
        self._items[key] = Pending(pool, envelope, time.monotonic() if now is None else now, failovers)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)

    def done(self, tenant: str, request_id: str) -> bool:
        return self._items.pop((tenant, request_id), None) is not None

    def of_pool(self, pool: str) -> list[tuple[tuple[str, str], Pending]]:
        """((tenant, request id), entry) of every request waiting on `pool`, oldest first."""
        return [(key, p) for key, p in self._items.items() if p.pool == pool]

    def expire(self, now: float | None = None) -> int:
        """Forget requests older than the TTL (their requesters gave up long ago)."""
        now = time.monotonic() if now is None else now
        old = [rid for rid, p in self._items.items() if now - p.sent > self.ttl_s]
        for rid in old:
            del self._items[rid]
        return len(old)
