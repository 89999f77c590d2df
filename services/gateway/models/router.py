"""GET /v1/models, GET /v1/models/{id}."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from shared.openai.protocol import ModelCard, ModelList

from ..deps import Tenant, state_of
from .serving import ModelCatalog

router = APIRouter()


@router.get("/v1/models", response_model=ModelList)
async def models(request: Request, tenant: Tenant) -> JSONResponse:
    """Base models, then the adapters this tenant may use (with `parent`, as vLLM lists LoRAs)."""
    return JSONResponse(await state_of(request, "models", ModelCatalog).list(tenant))


@router.get("/v1/models/{model_id:path}", response_model=ModelCard)
async def model(model_id: str, request: Request, tenant: Tenant) -> JSONResponse:
    """One entry of /v1/models (a base model or an adapter this tenant may use); 404 otherwise."""
    return JSONResponse(await state_of(request, "models", ModelCatalog).card(tenant, model_id))
