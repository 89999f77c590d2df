"""GET /v1/models."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from shared.openai.protocol import ModelList

from ..deps import Tenant, state_of
from .serving import ModelCatalog

router = APIRouter()


@router.get("/v1/models", response_model=ModelList)
async def models(request: Request, tenant: Tenant) -> JSONResponse:
    """Base models, then the adapters this tenant may use (with `parent`, as vLLM lists LoRAs)."""
    return JSONResponse(await state_of(request, "models", ModelCatalog).list(tenant))
