"""GET /v1/models, GET /v1/models/{id}."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from shared.openai.protocol import ErrorBody

from ..deps import Tenant, state_of
from .protocol import ModelCard, ModelList
from .serving import ModelCatalog, card_body

router = APIRouter()


@router.get("/v1/models", response_model=ModelList)
async def models(request: Request, tenant: Tenant) -> JSONResponse:
    """Base models, then the adapters this tenant may use (with `parent`, versions and aliases)."""
    return JSONResponse(card_body(await state_of(request, "models", ModelCatalog).list(tenant)))


@router.get(
    "/v1/models/{model_id:path}",
    response_model=ModelCard,
    responses={
        404: {"model": ErrorBody, "description": "no such model, version or alias for this tenant"},
        503: {"model": ErrorBody, "description": "the adapter registry is unavailable"},
    },
)
async def model(model_id: str, request: Request, tenant: Tenant) -> JSONResponse:
    """A base model, or an adapter this tenant may use as `name`, `name@3` or `name@alias`
    (`root` and `version` say which version that pins now); 404 otherwise."""
    return JSONResponse(card_body(await state_of(request, "models", ModelCatalog).card(tenant, model_id)))
