"""The SSE side of a completion: role chunks, deltas (deduped per choice), the final remainder,
usage, and `[DONE]`; errors and the deadline end the stream with an error event."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from switchyard.v1.events_pb2 import StreamDelta

from shared.openai.errors import error_body, error_type
from shared.openai.format import (
    StreamDeduper,
    choice_logprobs,
    chunk,
    pinned_adapter,
    reply_model,
    response_body,
)
from shared.runtime.envelope import Envelope, ErrorCode, Kind

from ..replies import Waiter

if TYPE_CHECKING:
    from .serving import CompletionServing

DONE = b"data: [DONE]\n\n"


def event(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


class StreamReply:
    """One stream's events; `events` gives the slots back when it ends, however it ends."""

    def __init__(
        self,
        serving: CompletionServing,
        env: Envelope,
        waiter: Waiter,
        n: int,
        created: int,
        deadline_s: float,
        include_usage: bool,
    ) -> None:
        self.serving, self.env, self.waiter, self.n = serving, env, waiter, n
        self.created, self.deadline_s, self.include_usage = created, deadline_s, include_usage
        self.rid, self.kind, self.model = env.request_id, env.kind, reply_model(env)
        # Pinned before the stream starts, so the first chunk already names the adapter version.
        self.fingerprint = pinned_adapter(env)
        self.dedupe = StreamDeduper(n)
        self.timed_out = False

    def _chunk(self, index: int, **kw: Any) -> dict[str, Any]:
        return chunk(self.kind, self.rid, self.model, self.created, index, fingerprint=self.fingerprint, **kw)

    def parts(self, delta: StreamDelta) -> Iterator[bytes]:
        """A delta's new text and, when asked for, its tokens' logprobs, deduped per choice."""
        env = self.env
        texts = dict(self.dedupe.new_text(delta))
        lps = self.dedupe.new_logprobs(delta) if env.request.sampling.logprobs else {}
        for index in sorted(texts.keys() | lps.keys()):
            lp = choice_logprobs(env, *lps[index]) if index in lps else None
            yield event(self._chunk(index, text=texts.get(index, ""), logprobs=lp))

    async def events(
        self, finish_timings: Callable[[Envelope], float], release: Callable[[], None]
    ) -> AsyncIterator[bytes]:
        try:
            async for ev in self._deltas():
                yield ev
            if self.timed_out:
                return  # the error event and [DONE] are sent
            for ev in self._final(self.waiter.final.result(), finish_timings):
                yield ev
        finally:
            self.serving.backend.replies.release(self.rid)
            release()

    async def _deltas(self) -> AsyncIterator[bytes]:
        """Role chunks, then every delta until the final response (or the deadline)."""
        waiter = self.waiter
        assert waiter.deltas is not None
        if self.kind != Kind.KIND_COMPLETION:
            for i in range(self.n):
                yield event(self._chunk(i, role=True))
        while not waiter.final.done():
            timeout = self.deadline_s - time.time()
            if timeout <= 0:
                s = self.serving.settings
                yield event(
                    error_body(
                        f"request timed out after {s.gateway_timeout_s:g}s",
                        "timeout_error",
                        ErrorCode.DEADLINE_EXCEEDED,
                    )
                )
                self.timed_out = True
                yield DONE
                return
            getter = asyncio.ensure_future(waiter.deltas.get())
            await asyncio.wait([getter, waiter.final], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            for ev in self.parts(getter.result()):
                yield ev
        while not waiter.deltas.empty():
            for ev in self.parts(waiter.deltas.get_nowait()):
                yield ev

    def _final(self, final: Envelope, finish_timings: Callable[[Envelope], float]) -> Iterator[bytes]:
        """What the deltas missed, each choice's finish, usage when asked for, then [DONE]."""
        env = self.env
        if final.error.code:
            yield event(
                error_body(final.error.message, error_type(final.error.http_status), final.error.code)
            )
            yield DONE
            return
        for c in final.response.choices:
            rest = self.dedupe.remainder(c.index, c.text)
            lp = None
            if env.request.sampling.logprobs:
                missed, offset = self.dedupe.remaining_logprobs(c.index, c.token_logprobs)
                lp = choice_logprobs(env, missed, offset) if missed else None
            if rest or lp:
                yield event(self._chunk(c.index, text=rest, logprobs=lp))
            yield event(self._chunk(c.index, finish_reason=c.finish_reason or "stop"))
        e2e = finish_timings(final)
        if self.include_usage:
            body = response_body(final, self.created, e2e)
            tail = self._chunk(0)
            tail["choices"] = []
            tail["usage"] = body["usage"]
            tail["switchyard"] = body["switchyard"]
            yield event(tail)
        yield DONE
