"""registry: the adapter REST API over object storage; every change goes to sy.adapters."""

from __future__ import annotations

import asyncio

from switchyard.v1.events_pb2 import AdapterEvent

from shared.runtime.bus import OutRecord, Producer
from shared.runtime.config import Settings
from shared.runtime.follow import follow
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.storage import open_store
from shared.runtime.telemetry import get_logger

from .api import create_app
from .catalog import Catalog

log = get_logger(__name__)

RETRY_S = 2.0


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    topic = settings.topic("adapters")

    async def publish(ev: AdapterEvent) -> None:
        await producer.send(OutRecord(topic=topic, key=ev.name.encode(), value=ev.SerializeToString()))

    catalog = Catalog(open_store(settings), publish)
    await catalog.load()

    async def resend(stop: asyncio.Event) -> None:
        """Start-up resync and retries of events whose publish failed."""
        while not stop.is_set():
            await catalog.flush_unsent()
            try:
                await asyncio.wait_for(stop.wait(), timeout=RETRY_S)
            except TimeoutError:
                pass

    def republish() -> None:
        n = catalog.resync_all()
        log.warning("sy.adapters lost its log (broker restart); republishing adapter state", adapters=n)

    async def watch(stop: asyncio.Event) -> None:
        """Follow sy.adapters: a broker that restarted empty (the embedded one keeps topics in
        memory) has lost every adapter's state, which readers rebuild from it."""
        while not stop.is_set():
            try:
                await follow(
                    settings, topic, lambda _: None, stop, client_id="registry-watch", on_reset=republish
                )
            except Exception as exc:  # noqa: BLE001 - the broker may be down: follow again
                log.warning("sy.adapters watch failed; again", error=repr(exc))
                await asyncio.sleep(RETRY_S)

    return Service([], background=[resend, watch], app=create_app(settings, catalog))


def main() -> None:
    run_service(
        "registry",
        build,
        secrets=lambda s: HeldSecrets(tenant_keys=s.api_keys, token=s.internal_token.get_secret_value()),
    )


if __name__ == "__main__":
    main()
