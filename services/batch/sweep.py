"""The sweep: starts every job found in storage that no live worker holds (a lost or never
delivered task, a killed worker), so no broker is trusted with a job's life."""

from __future__ import annotations

import asyncio
import time

from shared.batches.celery_app import QUEUE, RUN_BATCH, make_celery
from shared.batches.store import BatchStore
from shared.runtime.config import Settings
from shared.runtime.periodic import every
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


class Sweep:
    """Enqueue jobs that are not final and whose lease is missing or expired."""

    def __init__(self, settings: Settings, store: BatchStore) -> None:
        self.s, self.store = settings, store
        self.celery = make_celery(settings)
        self._sent: dict[str, float] = {}
        self.enqueued = 0

    async def once(self) -> None:
        now = time.time()
        for tenant, batch_id in await self.store.active():
            lease = await self.store.lease(batch_id)
            if lease is not None and lease.get("until", 0) > now:
                continue
            # Give a task already queued (by the gateway, or by us) time to start first.
            if now - self._sent.get(batch_id, 0) < self.s.batch_lease_s:
                continue
            batch = await self.store.get_batch(tenant, batch_id)
            if batch is None or (lease is None and now - batch.created_at < self.s.batch_lease_s):
                continue
            self._sent[batch_id] = now
            self.enqueued += 1
            log.info("batch job (re)enqueued by the sweep", batch_id=batch_id, had_lease=lease is not None)
            await asyncio.to_thread(self.celery.send_task, RUN_BATCH, args=[tenant, batch_id], queue=QUEUE)

    async def run(self, stop: asyncio.Event) -> None:
        """`once` at start and every SY_BATCH_SWEEP_INTERVAL_S; a storage or broker hiccup: next round."""
        await every(self.s.batch_sweep_interval_s, self.once, stop, name="batch sweep", at_once=True)
