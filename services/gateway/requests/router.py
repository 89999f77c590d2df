"""POST /v1/requests (queue a request), GET /v1/requests/{id} (its status and result)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse

from shared.openai.protocol import AsyncRequest, AsyncRequestStatus

from ..deps import Tenant, ready_after_body, state_of
from .serving import AsyncRequests

router = APIRouter()


def serving_of(request: Request) -> AsyncRequests:
    return state_of(request, "requests", AsyncRequests)


@router.post("/v1/requests", status_code=202, response_model=AsyncRequestStatus)
async def submit_async(
    admitted: Annotated[tuple[AsyncRequest, str], Depends(ready_after_body(AsyncRequest))],
    request: Request,
    idempotency_key: str | None = Header(default=None),
) -> JSONResponse:
    """Queue a request; poll GET /v1/requests/{id}. Retrying with the same request_id is safe."""
    body, tenant = admitted
    current = await serving_of(request).submit(body, tenant, idempotency_key, request.headers)
    return JSONResponse(current, status_code=202 if current.get("status") == "queued" else 200)


@router.get("/v1/requests/{request_id}", response_model=AsyncRequestStatus)
async def get_request(request_id: str, request: Request, tenant: Tenant) -> JSONResponse:
    """Status, result and per-stage breakdown of an async request."""
    return JSONResponse(await serving_of(request).get(request_id, tenant))
