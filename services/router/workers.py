"""Live worker state from sy.heartbeats, and the adapter-affinity choice of a partition.

A pool's workers share one consumer group on `sy.infer.<pool>`, so a request reaches a given
worker by landing on a partition that worker owns (heartbeats list them). Requests for an
adapter that some live worker already holds go to that worker's partitions; otherwise the
key (model:adapter) hashes to a partition, which also keeps one adapter on one worker.
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

    @property
    def load(self) -> float:
        return self.hb.in_flight / max(1, self.hb.max_in_flight)


class WorkerTable:
    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self._workers: dict[str, Worker] = {}

    def update(self, hb: Heartbeat, now: float | None = None) -> None:
        self._workers[hb.worker_id] = Worker(hb, time.monotonic() if now is None else now)

    def live(self, pool: str, now: float | None = None) -> list[Worker]:
        now = time.monotonic() if now is None else now
        return [
            w
            for w in self._workers.values()
            if w.hb.pool == pool and now - w.seen <= self.stale_after_s and w.hb.partitions
        ]


def _stable_index(key: str, n: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % n


def affinity_partition(
    table: WorkerTable, pool: str, adapter_label: str, key: str, now: float | None = None
) -> tuple[int | None, str]:
    """A partition of a live, not saturated worker holding `adapter_label`; None = hash the key."""
    if not adapter_label:
        return None, "hash"
    holders = [
        w
        for w in table.live(pool, now)
        if adapter_label in w.hb.adapters and w.hb.in_flight < w.hb.max_in_flight
    ]
    if not holders:
        return None, "hash"
    best = min(holders, key=lambda w: (w.load, w.hb.worker_id))
    parts = sorted(best.hb.partitions)
    return parts[_stable_index(key, len(parts))], f"resident on {best.hb.worker_id}"
