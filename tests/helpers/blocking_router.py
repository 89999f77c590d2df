"""A router stand-in that hangs on one request id, so a test can SIGKILL it before commit.

Same group and topics as services/router; everything else is the real shared.runtime.stage/bus code.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import Emit, envelope_consumer

BLOCK_ID = os.environ.get("TEST_BLOCK_ID", "r-block")
MARKER = Path(os.environ["TEST_MARKER"])


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    out = settings.topic("infer.vllm")

    async def handle(env: Envelope) -> list[Emit]:
        if env.request_id == BLOCK_ID:
            MARKER.write_text("reached")
            await asyncio.Event().wait()  # never returns: its offset is never committed
        return [Emit(out, env)]

    return Service([envelope_consumer("router", "routing", handle, producer, settings)])


if __name__ == "__main__":
    run_service("router", build, secrets=lambda _: HeldSecrets())
