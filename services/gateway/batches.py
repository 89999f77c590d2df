"""OpenAI Files and Batches endpoints: the job itself runs in services/batch (Celery).

The gateway stores the upload and the new batch object, then enqueues the job by task name.
If enqueueing fails the job is not lost: the batch service also starts any job it finds in
storage that nobody runs (`batch-active/`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from shared.batches.celery_app import QUEUE, RUN_BATCH, make_celery
from shared.batches.store import TERMINAL, BatchObject, BatchStore, new_batch_id
from shared.openai.errors import error_response
from shared.runtime.config import Settings
from shared.runtime.storage import open_store
from shared.runtime.telemetry import get_logger

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


class CreateBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_file_id: str = Field(min_length=1, max_length=128)
    endpoint: str
    completion_window: str = "24h"
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


def _err(status: int, message: str, code: str, param: str | None = None) -> JSONResponse:
    return error_response("gateway", status, message, code, param)


def _quota(message: str, code: str) -> JSONResponse:
    """A tenant's quota of kept files or open batches is full: 429, retry once some are done."""
    return error_response("gateway", 429, message, code, None, {"Retry-After": "30"})


def _view(batch: BatchObject, cancel_at: int | None) -> dict[str, Any]:
    """A cancel the job has not picked up yet already reads as 'cancelling'."""
    if cancel_at is not None and batch.status not in TERMINAL and batch.status != "cancelling":
        batch = batch.model_copy(update={"status": "cancelling", "cancelling_at": cancel_at})
    return batch.model_dump()


def batch_router(settings: Settings, tenant_of: Callable[..., str]) -> APIRouter:
    router = APIRouter()
    store = BatchStore(open_store(settings))
    celery = make_celery(settings)
    max_file = min(settings.batch_file_max_bytes, settings.gateway_max_body_bytes)

    async def enqueue(tenant: str, batch_id: str) -> None:
        try:
            await asyncio.to_thread(celery.send_task, RUN_BATCH, args=[tenant, batch_id], queue=QUEUE)
        except Exception as exc:  # noqa: BLE001 - the batch service's sweep starts it anyway
            log.warning(
                "could not enqueue batch job; the sweep will start it", batch_id=batch_id, error=str(exc)
            )

    @router.post("/v1/files")
    async def create_file(
        file: Annotated[UploadFile, File()], purpose: Annotated[str, Form()], tenant: str = Depends(tenant_of)
    ) -> Any:
        """Upload a JSONL batch input file (purpose `batch`)."""
        if purpose != "batch":
            return _err(400, f"purpose must be 'batch', got {purpose[:40]!r}", "invalid_purpose", "purpose")
        data = await file.read(max_file + 1)
        if len(data) > max_file:
            return _err(413, f"file exceeds {max_file} bytes", "file_too_large", "file")
        if not data.strip():
            return _err(400, "file is empty", "empty_file", "file")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _err(400, f"file is not UTF-8 (byte {exc.start})", "invalid_encoding", "file")
        lines = sum(1 for line in data.splitlines() if line.strip())
        if lines > settings.batch_file_max_lines:
            return _err(
                400,
                f"file has {lines} lines, limit SY_BATCH_FILE_MAX_LINES={settings.batch_file_max_lines}",
                "too_many_lines",
                "file",
            )
        if await store.count_files(tenant) >= settings.tenant_max_files:
            return _quota(
                f"this tenant keeps {settings.tenant_max_files} files already (SY_TENANT_MAX_FILES): "
                "delete some first",
                "too_many_files",
            )
        name = (file.filename or "input.jsonl").rsplit("/", 1)[-1][:200]
        meta = await store.put_file(tenant, name, purpose, data)
        log.info("file stored", file_id=meta.id, tenant=tenant, bytes=meta.bytes, lines=lines)
        return meta.model_dump()

    @router.get("/v1/files")
    async def list_files(tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        files = await store.list_files(tenant)
        return {"object": "list", "data": [f.model_dump() for f in files], "has_more": False}

    @router.get("/v1/files/{file_id}")
    async def get_file(file_id: str, tenant: str = Depends(tenant_of)) -> Any:
        meta = await store.get_file(tenant, file_id)
        if meta is None:
            return _err(404, f"No such File object: {file_id}", "not_found", "file_id")
        return meta.model_dump()

    @router.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str, tenant: str = Depends(tenant_of)) -> Any:
        """The bytes of an input, output or error file."""
        data = await store.file_content(tenant, file_id)
        if data is None:
            return _err(404, f"No such File object: {file_id}", "not_found", "file_id")
        return Response(data, media_type="application/jsonl")

    @router.delete("/v1/files/{file_id}")
    async def delete_file(file_id: str, tenant: str = Depends(tenant_of)) -> Any:
        if not await store.delete_file(tenant, file_id):
            return _err(404, f"No such File object: {file_id}", "not_found", "file_id")
        return {"id": file_id, "object": "file", "deleted": True}

    @router.post("/v1/batches")
    async def create_batch(body: CreateBatch, tenant: str = Depends(tenant_of)) -> Any:
        """Start a batch job over an uploaded file; poll GET /v1/batches/{id}."""
        if body.endpoint not in ENDPOINTS:
            return _err(
                400,
                f"endpoint must be one of {list(ENDPOINTS)}, got {body.endpoint[:80]!r}",
                "invalid_endpoint",
                "endpoint",
            )
        window = window_seconds(body.completion_window)
        if window is None:
            return _err(
                400,
                f"completion_window must be like '24h' (at most 7 days), got {body.completion_window[:20]!r}",
                "invalid_completion_window",
                "completion_window",
            )
        meta = await store.get_file(tenant, body.input_file_id)
        if meta is None:
            return _err(404, f"No such File object: {body.input_file_id}", "not_found", "input_file_id")
        if meta.purpose != "batch":
            return _err(400, "input file must have purpose 'batch'", "invalid_input_file", "input_file_id")
        open_batches = [b for b in await store.list_batches(tenant) if b.status not in TERMINAL]
        if len(open_batches) >= settings.tenant_max_batches:
            return _quota(
                f"{settings.tenant_max_batches} batches already unfinished for this tenant "
                "(SY_TENANT_MAX_BATCHES): wait for some to finish or cancel them",
                "too_many_batches",
            )
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
        await store.put_batch(tenant, batch)
        await enqueue(tenant, batch.id)
        log.info("batch created", batch_id=batch.id, tenant=tenant, input_file_id=batch.input_file_id)
        return batch.model_dump()

    @router.get("/v1/batches")
    async def list_batches(
        tenant: str = Depends(tenant_of),
        limit: int = Query(default=20, ge=1, le=100),
        after: str | None = None,
    ) -> dict[str, Any]:
        batches = await store.list_batches(tenant)
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

    @router.get("/v1/batches/{batch_id}")
    async def get_batch(batch_id: str, tenant: str = Depends(tenant_of)) -> Any:
        batch = await store.get_batch(tenant, batch_id)
        if batch is None:
            return _err(404, f"No such Batch object: {batch_id}", "not_found", "batch_id")
        return _view(batch, await store.cancel_requested(batch_id))

    @router.post("/v1/batches/{batch_id}/cancel")
    async def cancel_batch(batch_id: str, tenant: str = Depends(tenant_of)) -> Any:
        """Stop sending lines; the job ends as `cancelled` with the results it has."""
        batch = await store.get_batch(tenant, batch_id)
        if batch is None:
            return _err(404, f"No such Batch object: {batch_id}", "not_found", "batch_id")
        if batch.status in ("completed", "failed", "expired"):
            return _err(409, f"Cannot cancel a batch with status '{batch.status}'", "batch_not_cancellable")
        at = await store.cancel_requested(batch_id)
        if at is None and batch.status != "cancelled":
            await store.request_cancel(batch_id)
            at = int(time.time())
            log.info("batch cancel requested", batch_id=batch_id, tenant=tenant)
        return _view(batch, at)

    return router
