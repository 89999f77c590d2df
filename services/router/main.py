"""router: sy.routing -> sy.infer.<pool>, or an error reply when no pool can serve."""

from __future__ import annotations

from shared.bus import Producer
from shared.config import Settings
from shared.envelope import Envelope, ErrorCode, set_error
from shared.health import Health
from shared.service import Service, run_service
from shared.stage import Emit, envelope_consumer
from shared.telemetry import get_logger

from .policy import choose_pool

log = get_logger(__name__)


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    pools = list(settings.pools)
    responses = settings.topic("responses")

    async def handle(env: Envelope) -> list[Emit]:
        d = choose_pool(env, pools)
        if d.pool is None:
            log.info("no pool", reason=d.reason)
            return [Emit(responses, set_error(env, ErrorCode.NO_POOL, d.reason, "router", http_status=404))]
        env.pool = d.pool.name
        return [Emit(settings.topic(d.pool.topic_suffix), env, key=d.key)]

    return Service([envelope_consumer("router", "routing", handle, producer, settings)])


def main() -> None:
    run_service("router", build)


if __name__ == "__main__":
    main()
