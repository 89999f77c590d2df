"""Keeping sy.adapters whole: retries of failed publishes, and a full resync when the log is lost."""

from __future__ import annotations

import asyncio

from switchyard.v1.events_pb2 import AdapterEvent

from shared.runtime.bus import OutRecord, Producer
from shared.runtime.config import Settings
from shared.runtime.follow import follow
from shared.runtime.telemetry import get_logger

from .catalog import Catalog, Publish

log = get_logger(__name__)

RETRY_S = 2.0


def publisher(settings: Settings, producer: Producer) -> Publish:
    """How the catalog publishes a change: one record on sy.adapters, keyed by the adapter's name."""
    topic = settings.topic("adapters")

    async def publish(ev: AdapterEvent) -> None:
        await producer.send(OutRecord(topic=topic, key=ev.name.encode(), value=ev.SerializeToString()))

    return publish


class AdapterEvents:
    """Repairs the catalog's sy.adapters when it needs it (the catalog publishes through `publisher`)."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings = settings
        self.topic = settings.topic("adapters")
        self.catalog = catalog

    async def resend(self, stop: asyncio.Event) -> None:
        """Start-up resync and retries of events whose publish failed."""
        while not stop.is_set():
            await self.catalog.flush_unsent()
            try:
                await asyncio.wait_for(stop.wait(), timeout=RETRY_S)
            except TimeoutError:
                pass

    def republish(self) -> None:
        n = self.catalog.resync_all()
        log.warning("sy.adapters lost its log (broker restart); republishing adapter state", adapters=n)

    async def watch(self, stop: asyncio.Event) -> None:
        """Follow sy.adapters: a broker that restarted empty (the embedded one keeps topics in
        memory) has lost every adapter's state, which readers rebuild from it."""
        while not stop.is_set():
            try:
                await follow(
                    self.settings,
                    self.topic,
                    lambda _: None,
                    stop,
                    client_id="registry-watch",
                    on_reset=self.republish,
                )
            except Exception as exc:  # noqa: BLE001 - the broker may be down: follow again
                log.warning("sy.adapters watch failed; again", error=repr(exc))
                await asyncio.sleep(RETRY_S)
