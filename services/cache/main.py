"""cache: sy.prepared -> sy.routing on a miss, sy.responses on a hit (process wiring only)."""

from __future__ import annotations

from shared.bus import Producer
from shared.config import Settings
from shared.envelope import Envelope
from shared.health import Health
from shared.service import Service, run_service
from shared.stage import Emit, envelope_consumer

from .passthrough import lookup


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    miss, hit = settings.topic("routing"), settings.topic("responses")

    async def handle(env: Envelope) -> list[Emit]:
        cached = lookup(env)
        return [Emit(hit, cached)] if cached is not None else [Emit(miss, env)]

    return Service([envelope_consumer("cache", "prepared", handle, producer, settings)])


def main() -> None:
    run_service("cache", build)


if __name__ == "__main__":
    main()
