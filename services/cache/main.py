"""cache: sy.prepared -> sy.responses on a hit, sy.routing on a miss; write-back from sy.responses.

Process wiring only: the stage is services/cache/stage.py (over lookup.py and the modules beside
it), the REST API services/cache/api.py. Without SY_MILVUS_URI (a service run outside the
launcher) or with SY_CACHE_ENABLED=false the stage is a pass-through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import CachePurge

from shared.runtime.bus import Producer, off_path_wait_ms
from shared.runtime.config import Settings
from shared.runtime.follow import follow
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import envelope_consumer
from shared.runtime.storage import open_store
from shared.runtime.telemetry import get_logger

from .api import cache_app
from .stage import CacheStage, purge_record, sender

log = get_logger(__name__)

OnRecord = Callable[[ConsumerRecord], Awaitable[None]]
Background = Callable[[asyncio.Event], Awaitable[None]]


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    stage = CacheStage(settings, open_store(settings), send=sender(producer))
    active = settings.cache_enabled and bool(settings.milvus_uri)
    if not active:
        log.warning("cache is a pass-through", milvus_uri=settings.milvus_uri, enabled=settings.cache_enabled)

    def reader(topic: str, on_record: OnRecord, client_id: str, gated: bool = True) -> Background:
        """Follow a topic once the cache is up; ungated (purges): from its end, before the front fills."""

        async def run(stop: asyncio.Event) -> None:
            if not gated or await stage.when_ready(stop):
                topic_ = settings.topic(topic)
                await follow(settings, topic_, on_record, stop, from_beginning=gated, client_id=client_id)

        return run

    async def announce(ev: CachePurge) -> None:
        await producer.send(purge_record(settings, ev))

    consumers = [envelope_consumer("cache", "prepared", stage.handle, producer, settings)]
    background: list[Background] = []
    if active:
        health.add_check("cache_store", lambda: stage.cache is not None)
        consumers.append(
            envelope_consumer(
                "cache_writeback", "responses", stage.write_back, producer, settings,
                validate_input=False, fetch_max_wait_ms=off_path_wait_ms(settings),
            )
        )  # fmt: skip
        background = [
            stage.run,
            reader("adapters", stage.on_adapter, "cache-adapters"),
            reader("heartbeats", stage.on_heartbeat, "cache-hb"),
            stage.floors_sync,
            reader("cache.purges", stage.on_purge, "cache-purges", gated=False),
        ]
    return Service(consumers, background=background, app=cache_app(settings, stage, announce))


def main() -> None:
    run_service("cache", build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
