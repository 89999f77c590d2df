"""Envelopes the tests send: one user turn of chat, as the cache and pipeline tests need it."""

from __future__ import annotations

from switchyard.v1.envelope_pb2 import ChatMessage, Request, SamplingParams

from shared.runtime.envelope import Envelope, Kind


def chat(rid: str, text: str, tenant: str = "acme", max_tokens: int = 16, stream: bool = False) -> Envelope:
    """A greedy (temperature 0, so cacheable) one-turn chat request to sy-tiny."""
    return Envelope(
        request_id=rid,
        tenant=tenant,
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        request=Request(
            messages=[ChatMessage(role="user", content=text)],
            sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0, stream=stream),
        ),
    )
