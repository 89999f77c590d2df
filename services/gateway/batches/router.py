"""/v1/batches: create, list, read and cancel batch jobs (logic: serving.py)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from shared.openai.protocol import Batch, BatchList, CreateBatch

from ..deps import Tenant, state_of
from .serving import BatchServing

router = APIRouter()


def serving_of(request: Request) -> BatchServing:
    return state_of(request, "batches", BatchServing)


@router.post("/v1/batches", response_model=Batch)
async def create_batch(body: CreateBatch, request: Request, tenant: Tenant) -> JSONResponse:
    """Start a batch job over an uploaded file; poll GET /v1/batches/{id}."""
    return JSONResponse(await serving_of(request).create(body, tenant))


@router.get("/v1/batches", response_model=BatchList)
async def list_batches(
    request: Request,
    tenant: Tenant,
    limit: int = Query(default=20, ge=1, le=100),
    after: str | None = None,
) -> JSONResponse:
    return JSONResponse(await serving_of(request).list(tenant, limit, after))


@router.get("/v1/batches/{batch_id}", response_model=Batch)
async def get_batch(batch_id: str, request: Request, tenant: Tenant) -> JSONResponse:
    return JSONResponse(await serving_of(request).get(batch_id, tenant))


@router.post("/v1/batches/{batch_id}/cancel", response_model=Batch)
async def cancel_batch(batch_id: str, request: Request, tenant: Tenant) -> JSONResponse:
    """Stop sending lines; the job ends as `cancelled` with the results it has."""
    return JSONResponse(await serving_of(request).cancel(batch_id, tenant))
