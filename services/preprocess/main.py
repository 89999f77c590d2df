"""preprocess: sy.requests -> sy.prepared (process wiring only)."""

from __future__ import annotations

from shared.bus import Producer
from shared.config import Settings
from shared.envelope import Envelope
from shared.health import Health
from shared.service import Service, run_service
from shared.stage import Emit, envelope_consumer

from .prepare import Preprocessor, TokenCounter


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    pre = Preprocessor(TokenCounter(settings.model_dir))
    out = settings.topic("prepared")

    async def handle(env: Envelope) -> list[Emit]:
        return [Emit(out, pre.prepare(env))]

    return Service([envelope_consumer("preprocess", "requests", handle, producer, settings)])


def main() -> None:
    run_service("preprocess", build)


if __name__ == "__main__":
    main()
