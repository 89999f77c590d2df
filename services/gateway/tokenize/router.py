"""POST /tokenize, POST /detokenize: vLLM's routes (outside /v1, as vLLM serves them)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..deps import Tenant, state_of
from .protocol import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse
from .serving import TokenizeServing

router = APIRouter()


def serving_of(request: Request) -> TokenizeServing:
    return state_of(request, "tokenize", TokenizeServing)


@router.post("/tokenize", response_model=TokenizeResponse)
async def tokenize(body: TokenizeRequest, request: Request, tenant: Tenant) -> JSONResponse:
    """Token ids of a prompt, or of chat messages rendered with the model's chat template (as a
    worker renders them); `count` and the model's `max_model_len` beside them."""
    return JSONResponse(await serving_of(request).tokenize(body, tenant))


@router.post("/detokenize", response_model=DetokenizeResponse)
async def detokenize(body: DetokenizeRequest, request: Request, tenant: Tenant) -> JSONResponse:
    """The text of token ids (ids outside the model's vocabulary are a 400)."""
    return JSONResponse(await serving_of(request).detokenize(body, tenant))
