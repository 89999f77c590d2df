"""vllm_worker: sy.infer.<pool> -> sy.stream (deltas) + sy.responses (final), heartbeats to sy.heartbeats.

The worker is the shared GenerationWorker (shared/generation/worker.py); its engine, vLLM
in-process with LoRA adapters, is services/vllm_worker/generation.py.
"""

from __future__ import annotations

from shared.generation.worker import GenerationWorker
from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service

from .generation import VllmGeneration


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    return await GenerationWorker(settings, producer, VllmGeneration(settings)).build(health)


def main() -> None:
    run_service(
        "vllm_worker",
        build,
        secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()),
    )


if __name__ == "__main__":
    main()
