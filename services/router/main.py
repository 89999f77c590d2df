"""router: sy.routing -> sy.infer.<pool>, or an error reply when no pool can serve.

Live state: sy.heartbeats (workers per pool: health, load, resident adapters) and sy.responses
(answers clear the pending table; their TTFT feeds each pool's speed estimate). A pool whose
workers all went silent is out; its pending requests are routed again (fail-over).
Process wiring only: the stage is services/router/stage.py.
"""

from __future__ import annotations

import asyncio

from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.follow import follow
from shared.runtime.health import Health
from shared.runtime.periodic import every
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import envelope_consumer

from .stage import RouterStage


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    stage = RouterStage(settings, producer.send)

    async def heartbeats(stop: asyncio.Event) -> None:
        topic = settings.topic("heartbeats")
        await follow(settings, topic, stage.on_heartbeat, stop, from_beginning=False, client_id="router-hb")

    async def answers(stop: asyncio.Event) -> None:
        topic = stage.responses
        await follow(settings, topic, stage.on_response, stop, from_beginning=False, client_id="router-resp")

    async def failover(stop: asyncio.Event) -> None:
        """Route again what waits on a pool that went down (every 0.2-1 s, from the start)."""
        await every(
            stage.failover_period_s, stage.failover, stop, name="router failover", at_once=True, fatal=True
        )

    return Service(
        [envelope_consumer("router", "routing", stage.handle, producer, settings)],
        background=[heartbeats, answers, failover],
    )


def main() -> None:
    # The internal token only guards its admin paths (/metrics: shared/runtime/admin.py).
    run_service("router", build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
