"""Moved to shared/openai_schemas.py (the batch service validates its lines with the same models)."""

from shared.openai_schemas import (  # noqa: F401 - re-exported for the gateway's imports
    AsyncRequest,
    ChatCompletionRequest,
    ChatMessageIn,
    CompletionRequest,
)
