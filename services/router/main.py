"""router: sy.routing -> sy.infer.<pool>, or an error reply when no pool can serve.

Live state: sy.heartbeats (workers per pool: health, load, resident adapters) and sy.responses
(answers clear the pending table; their TTFT feeds each pool's speed estimate). A pool whose
workers all went silent is out; its pending requests are routed again (fail-over).
"""

from __future__ import annotations

import asyncio
import time

from switchyard.v1.events_pb2 import Heartbeat

from shared.runtime.bus import CONTENT_TYPE_HEADER, Producer, header
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, ErrorCode, decode, encode, set_error
from shared.runtime.follow import follow
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import Emit, envelope_consumer, out_record
from shared.runtime.telemetry import add_timing, get_logger

from .pending import PendingTable
from .policy import PoolState, adapter_label, choose_pool
from .workers import WorkerTable, affinity_partition, spread_partition

log = get_logger(__name__)


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    pools = list(settings.pools)
    responses = settings.topic("responses")
    workers = WorkerTable(stale_after_s=settings.router_stale_s)
    state = PoolState(workers)
    pending = PendingTable(settings.router_pending_max, ttl_s=2 * settings.gateway_timeout_s)

    def route(env: Envelope, exclude: frozenset[str] = frozenset(), why: str = "") -> Emit:
        """Decide, record the decision in the envelope (`route` timing), and build the emit."""
        start = time.time_ns()
        d = choose_pool(env, pools, state, exclude, park_max_s=settings.router_park_max_s)
        if d.pool is None:
            add_timing(env, "route", start, time.time_ns(), parent="router", reason=d.reason)
            log.info("no pool", reason=d.reason)
            return Emit(responses, set_error(env, ErrorCode.NO_POOL, d.reason, "router", d.http_status))
        env.pool = d.pool.name
        topic = settings.topic(d.pool.topic_suffix)
        label = adapter_label(env)
        if not env.adapter or not settings.router_adapter_affinity:
            # No affinity wanted: least loaded worker, else keyed by request id (spread).
            emit = Emit(topic, env, partition=spread_partition(workers, d.pool.name))
        else:
            partition, _why = affinity_partition(workers, d.pool.name, label, d.key)
            emit = Emit(topic, env, key=d.key, partition=partition)
        reason = f"{why}; {d.reason}" if why else d.reason
        add_timing(env, "route", start, time.time_ns(), parent="router", pool=d.pool.name, reason=reason)
        return emit

    async def handle(env: Envelope) -> list[Emit]:
        emit = route(env)
        if not emit.envelope.HasField("error"):
            pending.add(env.tenant, env.request_id, env.pool, encode(env))
        return [emit]

    def on_heartbeat(rec: object) -> None:
        workers.update(Heartbeat.FromString(rec.value))  # type: ignore[attr-defined]

    def on_response(rec: object) -> None:
        env = decode(rec.value, header(rec.headers, CONTENT_TYPE_HEADER))  # type: ignore[attr-defined]
        pending.done(env.tenant, env.request_id)
        if env.response.pool and not env.HasField("error"):
            for t in env.timings:
                if t.stage == "ttft":
                    state.observe(env.response.pool, (t.end_ns - t.start_ns) / 1e6)

    async def heartbeats(stop: asyncio.Event) -> None:
        await follow(
            settings,
            settings.topic("heartbeats"),
            on_heartbeat,
            stop,
            from_beginning=False,
            client_id="router-hb",
        )

    async def answers(stop: asyncio.Event) -> None:
        await follow(settings, responses, on_response, stop, from_beginning=False, client_id="router-resp")

    async def failover(stop: asyncio.Event) -> None:
        """Route again what waits on a pool that went down, where another pool can serve it."""
        period = max(0.2, min(1.0, settings.router_stale_s / 3))
        while not stop.is_set():
            pending.expire()
            for p in pools:
                if state.health(p.name) != "down":
                    continue
                moved = pending.of_pool(p.name)
                for (tenant, rid), item in moved:
                    env = decode(item.envelope)
                    age = state.last_seen_age(p.name) or 0.0
                    emit = route(
                        env, exclude=frozenset({p.name}), why=f"failover from {p.name} (silent {age:.1f}s)"
                    )
                    if emit.envelope.HasField("error"):
                        # Nowhere else to go: the record stays on the pool's topic, where a restarted
                        # worker answers it (redelivery), or the requester's deadline does. Failing it
                        # here would answer before the pool is back.
                        continue
                    try:
                        await producer.send(out_record(emit))
                    except Exception as exc:  # noqa: BLE001 - retried on the next pass
                        log.warning("failover send failed", request_id=rid, error=str(exc))
                        continue
                    pending.add(tenant, rid, env.pool, encode(env), failovers=item.failovers + 1)
                    log.info("failed over", request_id=rid, from_pool=p.name, to=env.pool or None)
            try:
                await asyncio.wait_for(stop.wait(), timeout=period)
            except TimeoutError:
                pass

    return Service(
        [envelope_consumer("router", "routing", handle, producer, settings)],
        background=[heartbeats, answers, failover],
    )


def main() -> None:
    # The internal token only guards its admin paths (/metrics: shared/runtime/admin.py).
    run_service("router", build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
