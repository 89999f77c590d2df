"""preprocess: sy.requests -> sy.prepared (the cache), or sy.routing where the cache could never
answer (process wiring only: the stage is stage.py, the ingest check ingest.py)."""

from __future__ import annotations

from shared.adapters.registry_client import RegistryClient
from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import envelope_consumer
from shared.runtime.storage import open_store

from .ingest import ingest_check
from .stage import PreprocessStage


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    stage = PreprocessStage(settings, RegistryClient(settings), open_store(settings))
    check = ingest_check(settings)
    return Service(
        [envelope_consumer("preprocess", "requests", stage.handle, producer, settings, check=check)]
    )


def main() -> None:
    run_service(
        "preprocess",
        build,
        secrets=lambda s: HeldSecrets(
            token=s.internal_token.get_secret_value(),
            signing_secrets={t: v.get_secret_value() for t, v in s.ingest_secrets.items()},
        ),
    )


if __name__ == "__main__":
    main()
