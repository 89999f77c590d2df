"""OpenAI Batches: the job itself runs in services/batch (Celery).

The gateway stores the upload and the new batch object, then enqueues the job by task name.
If enqueueing fails the job is not lost: the batch service also starts any job it finds in
storage that nobody runs (`batch-active/`).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from celery import Celery

from shared.batches.celery_app import QUEUE, RUN_BATCH
from shared.batches.store import TERMINAL, BatchObject, BatchStore, new_batch_id
from shared.openai.protocol import CreateBatch
from shared.runtime.config import Settings
from shared.runtime.telemetry import get_logger

from ..errors import ApiError

log = get_logger(__name__)

ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
WINDOW_RE = re.compile(r"^([1-9][0-9]{0,6})([smh])$")
MAX_WINDOW_S = 7 * 24 * 3600


def window_seconds(window: str) -> int | None:
    """'24h' (OpenAI's only value) and other whole s/m/h durations up to 7 days; None if invalid."""
    m = WINDOW_RE.match(window)
    if not m:
        return None
    secs = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]
    return secs if secs <= MAX_WINDOW_S else None


def _view(batch: BatchObject, cancel_at: int | None) -> dict[str, Any]:
    """A cancel the job has not picked up yet already reads as 'cancelling'."""
    if cancel_at is not None and batch.status not in TERMINAL and batch.status != "cancelling":
        batch = batch.model_copy(update={"status": "cancelling", "cancelling_at": cancel_at})
    return batch.model_dump()


def _missing(batch_id: str) -> ApiError:
    return ApiError(404, f"No such Batch object: {batch_id}", "not_found", "batch_id")


class BatchServing:
    def __init__(self, settings: Settings, store: BatchStore, celery: Celery) -> None:
        self.settings, self.store, self.celery = settings, store, celery

    async def enqueue(self, tenant: str, batch_id: str) -> None:
        try:
            await asyncio.to_thread(self.celery.send_task, RUN_BATCH, args=[tenant, batch_id], queue=QUEUE)
        except Exception as exc:  # noqa: BLE001 - the batch service's sweep starts it anyway
            log.warning(
                "could not enqueue batch job; the sweep will start it", batch_id=batch_id, error=str(exc)
            )

    async def _check(self, body: CreateBatch, tenant: str) -> int:
        """The window in seconds, once the endpoint, window, input file and quota are good."""
        if body.endpoint not in ENDPOINTS:
            raise ApiError(
                400,
                f"endpoint must be one of {list(ENDPOINTS)}, got {body.endpoint[:80]!r}",
                "invalid_endpoint",
                "endpoint",
            )
        window = window_seconds(body.completion_window)
        if window is None:
            raise ApiError(
                400,
                f"completion_window must be like '24h' (at most 7 days), got {body.completion_window[:20]!r}",
                "invalid_completion_window",
                "completion_window",
            )
        meta = await self.store.get_file(tenant, body.input_file_id)
        if meta is None:
            raise ApiError(404, f"No such File object: {body.input_file_id}", "not_found", "input_file_id")
        if meta.purpose != "batch":
            raise ApiError(400, "input file must have purpose 'batch'", "invalid_input_file", "input_file_id")
        open_batches = [b for b in await self.store.list_batches(tenant) if b.status not in TERMINAL]
        if len(open_batches) >= self.settings.tenant_max_batches:
            # A tenant's quota of open batches is full: 429, retry once some are done.
            raise ApiError(
                429,
                f"{self.settings.tenant_max_batches} batches already unfinished for this tenant "
                "(SY_TENANT_MAX_BATCHES): wait for some to finish or cancel them",
                "too_many_batches",
                headers={"Retry-After": "30"},
            )
        return window

    async def create(self, body: CreateBatch, tenant: str) -> dict[str, Any]:
        """Start a batch job over an uploaded file; poll GET /v1/batches/{id}."""
        window = await self._check(body, tenant)
        now = int(time.time())
        batch = BatchObject(
            id=new_batch_id(),
            endpoint=body.endpoint,
            input_file_id=body.input_file_id,
            completion_window=body.completion_window,
            created_at=now,
            expires_at=now + window,
            metadata=body.metadata,
        )
        await self.store.put_batch(tenant, batch)
        await self.enqueue(tenant, batch.id)
        log.info("batch created", batch_id=batch.id, tenant=tenant, input_file_id=batch.input_file_id)
        return batch.model_dump()

    async def list(self, tenant: str, limit: int, after: str | None) -> dict[str, Any]:
        batches = await self.store.list_batches(tenant)
        if after is not None:
            ids = [b.id for b in batches]
            batches = batches[ids.index(after) + 1 :] if after in ids else []
        page = batches[:limit]
        return {
            "object": "list",
            "data": [_view(b, None) for b in page],
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
            "has_more": len(batches) > limit,
        }

    async def get(self, batch_id: str, tenant: str) -> dict[str, Any]:
        batch = await self.store.get_batch(tenant, batch_id)
        if batch is None:
            raise _missing(batch_id)
        return _view(batch, await self.store.cancel_requested(batch_id))

    async def cancel(self, batch_id: str, tenant: str) -> dict[str, Any]:
        """Stop sending lines; the job ends as `cancelled` with the results it has."""
        batch = await self.store.get_batch(tenant, batch_id)
        if batch is None:
            raise _missing(batch_id)
        if batch.status in ("completed", "failed", "expired"):
            raise ApiError(
                409, f"Cannot cancel a batch with status '{batch.status}'", "batch_not_cancellable"
            )
        at = await self.store.cancel_requested(batch_id)
        if at is None and batch.status != "cancelled":
            await self.store.request_cancel(batch_id)
            at = int(time.time())
            log.info("batch cancel requested", batch_id=batch_id, tenant=tenant)
        return _view(batch, at)
