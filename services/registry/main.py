"""registry: the adapter REST API over object storage; every change goes to sy.adapters."""

from __future__ import annotations

from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.storage import open_store

from .api import create_app
from .catalog import Catalog
from .events import AdapterEvents, publisher


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    catalog = Catalog(open_store(settings), publisher(settings, producer))
    events = AdapterEvents(settings, catalog)
    await catalog.load()
    return Service([], background=[events.resend, events.watch], app=create_app(settings, catalog))


def main() -> None:
    run_service(
        "registry",
        build,
        secrets=lambda s: HeldSecrets(tenant_keys=s.api_keys, token=s.internal_token.get_secret_value()),
    )


if __name__ == "__main__":
    main()
