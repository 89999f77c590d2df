"""GET /v1/models, GET /v1/models/{id}."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from shared.openai.protocol import ErrorBody

from ..deps import Tenant, state_of
from .protocol import ModelCard, ModelList
from .serving import ModelCatalog, card_body

router = APIRouter()

PREFIX = "/v1/models/"


def asked_id(request: Request, model_id: str) -> str:
    """The id as sent: Starlette's `path` match stops at a newline (`/v1/models/x%0A` gives `x`),
    so the id is the rest of the decoded path, and `x\n` is a 404, not x's card."""
    path: str = request.scope["path"]
    return path[path.find(PREFIX) + len(PREFIX) :] if PREFIX in path else model_id


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
    catalog = state_of(request, "models", ModelCatalog)
    return JSONResponse(card_body(await catalog.card(tenant, asked_id(request, model_id))))
