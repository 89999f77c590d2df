"""Moved to shared/openai_format.py (the batch service formats results the same way)."""

from shared.openai_format import (  # noqa: F401 - re-exported for the gateway's imports
    StreamDeduper,
    chat_response,
    choice_logprobs,
    chunk,
    completion_response,
    reply_model,
    response_body,
    switchyard_info,
    to_envelope,
)
