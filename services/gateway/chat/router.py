"""POST /v1/chat/completions (the logic is the completions', completions/serving.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from shared.openai.protocol import ChatCompletion, ChatCompletionRequest, sse_responses

from ..completions.serving import CompletionServing
from ..deps import Admitted, admit_chat, state_of

router = APIRouter()


@router.post(
    "/v1/chat/completions", response_model=ChatCompletion, responses=sse_responses("ChatCompletionChunk")
)
async def chat_completions(
    admitted: Annotated[Admitted[ChatCompletionRequest], Depends(admit_chat)], request: Request
) -> Response:
    """Create a chat completion (OpenAI-compatible; `stream: true` for SSE)."""
    return await state_of(request, "completions", CompletionServing).create(admitted, request.headers)
