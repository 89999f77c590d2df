"""POST /v1/completions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from shared.openai.protocol import Completion, CompletionRequest, sse_responses

from ..deps import Admitted, admit_completion, state_of
from .serving import CompletionServing

router = APIRouter()


@router.post("/v1/completions", response_model=Completion, responses=sse_responses("CompletionChunk"))
async def completions(
    admitted: Annotated[Admitted[CompletionRequest], Depends(admit_completion)], request: Request
) -> Response:
    """Create a text completion (OpenAI-compatible)."""
    return await state_of(request, "completions", CompletionServing).create(admitted, request.headers)
