"""A stand-in for the pipeline behind an in-process gateway: it keeps every envelope the gateway
produced and answers each request someone waits for at once (chat, completions; async ones queue)."""

from __future__ import annotations

import asyncio

from switchyard.v1.envelope_pb2 import Choice

from services.gateway.replies import ReplyRouter
from shared.runtime.envelope import Envelope


class Answering:
    def __init__(self) -> None:
        self.replies = ReplyRouter()
        self.submitted: list[Envelope] = []

    async def submit(self, env: Envelope, topic: str | None = None) -> None:
        self.submitted.append(Envelope.FromString(env.SerializeToString()))
        if env.request_id in self.replies.waiters:
            out = Envelope()
            out.CopyFrom(env)
            out.response.choices.append(Choice(index=0, text="hello", finish_reason="stop"))
            out.response.usage.prompt_tokens, out.response.usage.completion_tokens = 3, 1
            out.response.usage.total_tokens = 4
            loop = asyncio.get_running_loop()
            loop.call_later(0.01, self.replies.on_response, out, 0)
