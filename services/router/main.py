"""router: sy.routing -> sy.infer.<pool>, or an error reply when no pool can serve."""

from __future__ import annotations

import asyncio

from switchyard.v1.events_pb2 import Heartbeat

from shared.bus import Producer, follow
from shared.config import Settings
from shared.envelope import Envelope, ErrorCode, set_error
from shared.health import Health
from shared.service import Service, run_service
from shared.stage import Emit, envelope_consumer
from shared.telemetry import get_logger

from .policy import choose_pool
from .workers import WorkerTable, affinity_partition, spread_partition

log = get_logger(__name__)


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    pools = list(settings.pools)
    responses = settings.topic("responses")
    workers = WorkerTable(stale_after_s=3 * settings.heartbeat_interval_s)

    async def handle(env: Envelope) -> list[Emit]:
        d = choose_pool(env, pools)
        if d.pool is None:
            log.info("no pool", reason=d.reason)
            return [Emit(responses, set_error(env, ErrorCode.NO_POOL, d.reason, "router", http_status=404))]
        env.pool = d.pool.name
        topic = settings.topic(d.pool.topic_suffix)
        if not env.adapter or not settings.router_adapter_affinity:
            # No affinity wanted: least loaded worker, else keyed by request id (spread).
            return [Emit(topic, env, partition=spread_partition(workers, d.pool.name))]
        label = f"{env.adapter_ref.name}@{env.adapter_ref.version}"
        partition, _why = affinity_partition(workers, d.pool.name, label, d.key)
        return [Emit(topic, env, key=d.key, partition=partition)]

    def on_heartbeat(rec: object) -> None:
        workers.update(Heartbeat.FromString(rec.value))  # type: ignore[attr-defined]

    async def heartbeats(stop: asyncio.Event) -> None:
        await follow(
            settings,
            settings.topic("heartbeats"),
            on_heartbeat,
            stop,
            from_beginning=False,
            client_id="router-hb",
        )

    return Service(
        [envelope_consumer("router", "routing", handle, producer, settings)], background=[heartbeats]
    )


def main() -> None:
    run_service("router", build)


if __name__ == "__main__":
    main()
