"""triton_worker: sy.infer.<pool> -> Triton (gRPC stream) -> sy.stream (deltas) + sy.responses (final).

The worker is the shared GenerationWorker (shared/generation/worker.py), as for the vLLM pool;
its engine, Triton over gRPC, is services/triton_worker/generation.py.
"""

from __future__ import annotations

from shared.generation.worker import GenerationWorker
from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service

from .generation import TritonGeneration

STAGE = TritonGeneration.stage


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    return await GenerationWorker(settings, producer, TritonGeneration(settings)).build(health)


def main() -> None:
    run_service(STAGE, build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
