"""A stand-in for the pipeline behind an in-process gateway: it keeps every envelope the gateway
produced and answers each request someone waits for at once (chat, completions; async ones queue),
with one choice per requested `n`, the given text and finish reason and the given usage."""

from __future__ import annotations

import asyncio

from switchyard.v1.envelope_pb2 import Choice

from services.gateway.replies import ReplyRouter
from shared.runtime.envelope import Envelope


class Answering:
    def __init__(
        self, text: str = "hello", finish_reason: str = "stop", usage: tuple[int, int] = (3, 1)
    ) -> None:
        self.replies = ReplyRouter()
        self.submitted: list[Envelope] = []
        self.text, self.finish_reason, self.usage = text, finish_reason, usage

    async def submit(self, env: Envelope, topic: str | None = None) -> None:
        self.submitted.append(Envelope.FromString(env.SerializeToString()))
        if env.request_id in self.replies.waiters:
            out = Envelope()
            out.CopyFrom(env)
            out.response.choices.extend(
                Choice(index=i, text=self.text, finish_reason=self.finish_reason)
                for i in range(env.request.sampling.n or 1)
            )
            usage = out.response.usage
            usage.prompt_tokens, usage.completion_tokens = self.usage
            usage.total_tokens = sum(self.usage)
            loop = asyncio.get_running_loop()
            loop.call_later(0.01, self.replies.on_response, out, 0)
