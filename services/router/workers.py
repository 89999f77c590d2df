"""Live worker state from sy.heartbeats, and the adapter-affinity choice of a partition.

A pool's workers share one consumer group on `sy.infer.<pool>`, so a request reaches a given
worker by landing on a partition that worker owns (heartbeats list them). Requests for an
adapter go to a live worker that already holds it, the least loaded one; when every holder
is saturated they spill to the least loaded other worker (which then holds it too). With no
heartbeats yet, the key (model:adapter) hashes to a partition, which keeps one adapter on one
worker. Load is the heartbeat's in-flight count plus what the router sent since that
heartbeat, so a burst between two heartbeats does not all land on one worker.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from switchyard.v1.events_pb2 import Heartbeat


@dataclass
class Worker:
    hb: Heartbeat
    seen: float
    sent_since: int = 0  # requests routed to it since its last heartbeat

    @property
    def in_flight(self) -> int:
        return self.hb.in_flight + self.sent_since

    @property
    def load(self) -> float:
        return self.in_flight / max(1, self.hb.max_in_flight)

    @property
    def saturated(self) -> bool:
        return self.in_flight >= max(1, self.hb.max_in_flight)


class WorkerTable:
    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self._workers: dict[str, Worker] = {}

    def update(self, hb: Heartbeat, now: float | None = None) -> None:
        self._workers[hb.worker_id] = Worker(hb, time.monotonic() if now is None else now)

    def live(self, pool: str, now: float | None = None, need_partitions: bool = True) -> list[Worker]:
        """Workers of `pool` with a fresh heartbeat (and, for affinity, assigned partitions)."""
        now = time.monotonic() if now is None else now
        return [
            w
            for w in self._workers.values()
            if w.hb.pool == pool
            and now - w.seen <= self.stale_after_s
            and (w.hb.partitions or not need_partitions)
        ]

    def seen(self, pool: str) -> bool:
        """Whether any worker of `pool` ever sent a heartbeat."""
        return any(w.hb.pool == pool for w in self._workers.values())

    def last_seen_age(self, pool: str, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        ages = [now - w.seen for w in self._workers.values() if w.hb.pool == pool]
        return min(ages) if ages else None


def _stable_index(key: str, n: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % n


def affinity_partition(
    table: WorkerTable, pool: str, adapter_label: str, key: str, now: float | None = None
) -> tuple[int | None, str]:
    """The partition for an adapter request, and why; None = let the key hash choose."""
    if not adapter_label:
        return None, "hash"
    live = table.live(pool, now)
    holders = [w for w in live if adapter_label in w.hb.adapters and not w.saturated]
    if holders:
        best, why = min(holders, key=lambda w: (w.load, w.hb.worker_id)), "resident"
    else:
        others = [w for w in live if not w.saturated]
        if not others or not any(adapter_label in w.hb.adapters for w in live):
            return None, "hash"  # nobody holds it yet: the key's partition, so it settles on one worker
        best, why = min(others, key=lambda w: (w.load, w.hb.worker_id)), "spill (holders saturated)"
    best.sent_since += 1
    parts = sorted(best.hb.partitions)
    return parts[_stable_index(key, len(parts))], f"{why} on {best.hb.worker_id}"


def spread_partition(table: WorkerTable, pool: str, now: float | None = None) -> int | None:
    """Base-model requests need no affinity: the least loaded live worker (None = hash by id)."""
    live = table.live(pool, now)
    if not live:
        return None
    best = min(live, key=lambda w: (w.load, w.hb.worker_id))
    best.sent_since += 1
    parts = sorted(best.hb.partitions)
    return parts[best.sent_since % len(parts)]
