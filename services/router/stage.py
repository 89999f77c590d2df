"""The router stage: routes each request to a pool, tracks what each pool owes, fails over.

No Kafka here: main.py feeds it envelopes and state-topic records, and `send` (the producer's) is
how a failed-over request leaves. The decision itself is policy.py, over workers.py's table.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import Heartbeat

from shared.runtime.bus import CONTENT_TYPE_HEADER, OutRecord, header
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, ErrorCode, decode, encode, set_error
from shared.runtime.stage import Emit, out_record
from shared.runtime.telemetry import add_timing, get_logger

from .pending import PendingTable
from .policy import PoolState, adapter_label, choose_pool
from .workers import WorkerTable, affinity_partition, spread_partition

log = get_logger(__name__)

Send = Callable[[OutRecord], Awaitable[object]]


class RouterStage:
    """Live pool state (workers' heartbeats, answers' TTFT), pending requests, and the routing."""

    def __init__(self, settings: Settings, send: Send) -> None:
        self.settings, self.send = settings, send
        self.pools = list(settings.pools)
        self.responses = settings.topic("responses")
        self.workers = WorkerTable(stale_after_s=settings.router_stale_s)
        self.state = PoolState(self.workers)
        self.pending = PendingTable(settings.router_pending_max, ttl_s=2 * settings.gateway_timeout_s)
        # How often pending requests of a down pool are looked at.
        self.failover_period_s = max(0.2, min(1.0, settings.router_stale_s / 3))

    def route(self, env: Envelope, exclude: frozenset[str] = frozenset(), why: str = "") -> Emit:
        """Decide, record the decision in the envelope (`route` timing), and build the emit."""
        s, start = self.settings, time.time_ns()
        d = choose_pool(env, self.pools, self.state, exclude, park_max_s=s.router_park_max_s)
        if d.pool is None:
            add_timing(env, "route", start, time.time_ns(), parent="router", reason=d.reason)
            log.info("no pool", reason=d.reason)
            return Emit(self.responses, set_error(env, ErrorCode.NO_POOL, d.reason, "router", d.http_status))
        env.pool = d.pool.name
        topic = s.topic(d.pool.topic_suffix)
        label = adapter_label(env)
        if not env.adapter or not s.router_adapter_affinity:
            # No affinity wanted: least loaded worker, else keyed by request id (spread).
            emit = Emit(topic, env, partition=spread_partition(self.workers, d.pool.name))
        else:
            partition, _why = affinity_partition(self.workers, d.pool.name, label, d.key)
            emit = Emit(topic, env, key=d.key, partition=partition)
        reason = f"{why}; {d.reason}" if why else d.reason
        add_timing(env, "route", start, time.time_ns(), parent="router", pool=d.pool.name, reason=reason)
        return emit

    async def handle(self, env: Envelope) -> list[Emit]:
        """sy.routing: one emit, to a pool's topic (then pending) or an error reply."""
        emit = self.route(env)
        if not emit.envelope.HasField("error"):
            self.pending.add(env.tenant, env.request_id, env.pool, encode(env))
        return [emit]

    def on_heartbeat(self, rec: ConsumerRecord) -> None:
        self.workers.update(Heartbeat.FromString(rec.value))

    def on_response(self, rec: ConsumerRecord) -> None:
        """An answer: its request is no longer pending, and its TTFT feeds the pool's estimate."""
        env = decode(rec.value, header(rec.headers, CONTENT_TYPE_HEADER))
        self.pending.done(env.tenant, env.request_id)
        if env.response.pool and not env.HasField("error"):
            for t in env.timings:
                if t.stage == "ttft":
                    self.state.observe(env.response.pool, (t.end_ns - t.start_ns) / 1e6)

    async def failover(self) -> None:
        """Route again what waits on a pool that went down, where another pool can serve it."""
        self.pending.expire()
        for p in self.pools:
            if self.state.health(p.name) == "down":
                await self._fail_over_pool(p.name)

    async def _fail_over_pool(self, pool: str) -> None:
        for (tenant, rid), item in self.pending.of_pool(pool):
            env = decode(item.envelope)
            age = self.state.last_seen_age(pool) or 0.0
            emit = self.route(env, exclude=frozenset({pool}), why=f"failover from {pool} (silent {age:.1f}s)")
            if emit.envelope.HasField("error"):
                # Nowhere else to go: the record stays on the pool's topic, where a restarted
                # worker answers it (redelivery), or the requester's deadline does. Failing it
                # here would answer before the pool is back.
                continue
            try:
                await self.send(out_record(emit))
            except Exception as exc:  # noqa: BLE001 - retried on the next pass
                log.warning("failover send failed", request_id=rid, error=str(exc))
                continue
            self.pending.add(tenant, rid, env.pool, encode(env), failovers=item.failovers + 1)
            log.info("failed over", request_id=rid, from_pool=pool, to=env.pool or None)
