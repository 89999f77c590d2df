"""Chat and text completions: the envelope out, the reply (JSON or SSE) back; no HTTP here
beyond the response objects. A chat completion is a completion with messages: one path for both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers

from shared.openai.format import pinned_adapter, response_body, to_envelope
from shared.runtime.envelope import Envelope, ErrorCode, new_request_id
from shared.runtime.genai import GenAiCall, ModelLabels
from shared.runtime.telemetry import IN_FLIGHT, STAGE_SECONDS, add_timing, get_logger, request_span

from ..backend import Backend, Peek
from ..cache_peek import worth_peeking
from ..deps import Admitted, Gate
from ..errors import ApiError, refuse_oversized
from ..models.serving import ModelCatalog
from ..replies import Waiter
from ..sse import BoundedStreamingResponse
from .stream import StreamReply

log = get_logger(__name__)


def adapter_header(env: Envelope) -> dict[str, str]:
    """`X-Switchyard-Adapter: name@version`, the adapter version that answered (also the body's
    `system_fingerprint` and `switchyard.adapter`); nothing for the base model."""
    pinned = pinned_adapter(env)
    return {"X-Switchyard-Adapter": pinned} if pinned else {}


class Handover:
    """One request on its way out: the cache peek (when worth it) and the record produced."""

    def __init__(self, serving: CompletionServing, env: Envelope, topic: str | None, waiter: Waiter) -> None:
        self.serving, self.env, self.topic, self.waiter = serving, env, topic, waiter
        self.handed = time.time_ns()
        self.held_until = 0
        self.submitted: asyncio.Future[None] | None = None

    async def run(self, peeking: bool) -> None:
        s, backend, env, waiter = self.serving.settings, self.serving.backend, self.env, self.waiter
        if peeking:
            assert backend.peek is not None
            peek_task = asyncio.create_task(
                self.serving.peek_cache(backend.peek, env.SerializeToString(), env.request_id, env.tenant)
            )
            self.serving.peeks.add(peek_task)  # a reference until it ends (the loop keeps only weak ones)
            peek_task.add_done_callback(self.serving.peeks.discard)
            if s.cache_peek_hold_ms > 0:
                # A hit within the hold is answered and never produced (no pipeline run at
                # all); a miss goes on with its lookup done. Past the hold the record goes
                # out and the peek goes on beside it (cache_peek.py).
                await asyncio.wait({peek_task}, timeout=s.cache_peek_hold_ms / 1000)
                self.held_until = time.time_ns()
        if not (peeking and waiter.final.done()):
            submitted = self.submitted = asyncio.ensure_future(backend.submit(env, self.topic))
            if peeking:
                # A later peek hit is the answer too: the reply does not wait for the
                # broker's ack of a record whose own answer will be a duplicate (still sent).
                await asyncio.wait({submitted, waiter.final}, return_when=asyncio.FIRST_COMPLETED)
            if submitted.done() or not waiter.final.done():
                await submitted
            else:
                self.serving.late_submits.add(submitted)
                submitted.add_done_callback(self.serving.submitted_late)

    def finish_timings(self, t0: int, final: Envelope) -> float:
        s, waiter = self.serving.settings, self.waiter
        add_timing(final, "gateway_accept", t0, self.handed)
        if (
            self.held_until
            and self.submitted is not None
            and all(t.stage != "cache_peek" for t in final.timings)
        ):
            add_timing(
                final, "gateway_peek_hold", self.handed, self.held_until
            )  # the pipeline's answer: held first
        if waiter.sent_ns:
            add_timing(
                final, "queue", waiter.sent_ns, waiter.received_ns, topic=s.topic("responses"), to="gateway"
            )
        add_timing(final, "gateway_reply", waiter.received_ns or time.time_ns(), time.time_ns())
        e2e = (time.time_ns() - t0) / 1e6
        STAGE_SECONDS.labels("gateway").observe(e2e / 1000)
        return e2e


class CompletionServing:
    """POST /v1/chat/completions and /v1/completions once admitted (deps.py)."""

    def __init__(self, backend: Backend, gate: Gate, models: ModelCatalog) -> None:
        self.backend, self.gate, self.models, self.settings = backend, gate, models, backend.settings
        self.peeks: set[asyncio.Task[None]] = set()
        self.late_submits: set[asyncio.Future[None]] = set()
        self.labels = ModelLabels(backend.models)
        in_flight = backend.in_flight
        IN_FLIGHT.labels("gateway").set_function(lambda: in_flight.used(""))

    async def create(self, admitted: Admitted[Any], headers: Headers) -> Response:
        """Admitted: the slots are held until the reply is sent or the stream ends (`release`)."""
        try:
            return await self._create(admitted, headers)
        except BaseException:
            admitted.release()
            raise

    def submitted_late(self, fut: asyncio.Future[None]) -> None:
        """The record of a request a peek already answered: nobody waits for it, so say if it failed."""
        self.late_submits.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("request record not produced after a peek answered it", error=repr(fut.exception()))

    async def peek_cache(self, peek: Peek, request: bytes, rid: str, tenant: str) -> None:
        """A hit answers the waiter now; a pipeline answer, if the request was produced, is a duplicate."""
        hit = await peek(request, rid, tenant)
        if hit is not None:
            self.backend.replies.on_response(hit, 0)

    async def _envelope(self, admitted: Admitted[Any], deadline_s: float) -> tuple[Envelope, str | None]:
        """The request as an envelope, its model checked and pinned, prepared here when it can be."""
        s, req = self.settings, admitted.req
        rid = new_request_id()
        env = to_envelope(
            req, request_id=rid, tenant=admitted.tenant, deadline_unix_ms=int(deadline_s * 1000)
        )
        await self.models.check(req.model, admitted.tenant, env)
        # A text request is prepared here and goes past preprocess (shared/prepare.py: one hop
        # fewer); media goes through sy.requests. Refusals (context length) answer at once.
        refuse_oversized(env, s.max_record_bytes)
        prepare = self.backend.prepare
        topic = await prepare(env, "gateway_accept") if prepare is not None else None
        await self.gate.spend_tokens(env)
        return env, topic

    async def _create(self, admitted: Admitted[Any], headers: Headers) -> Response:
        s, req, t0 = self.settings, admitted.req, admitted.t0
        created = int(time.time())
        deadline_s = time.time() + s.gateway_timeout_s
        env, topic = await self._envelope(admitted, deadline_s)
        rid, tenant = env.request_id, env.tenant
        waiter = self.backend.replies.register(rid, tenant, stream=req.stream)
        handover = Handover(self, env, topic, waiter)
        call = GenAiCall(env, self.labels)  # the request span: open until the reply
        try:
            with request_span(
                "gateway", headers, t0, end_on_exit=False, request_id=rid, tenant=tenant
            ) as span:
                call.start(span)
                await handover.run(self.backend.peek is not None and worth_peeking(env, s))
        except BaseException as exc:
            call.end(exc)
            if isinstance(exc, Exception):
                self.backend.replies.release(rid)
            raise

        def finish_timings(final: Envelope) -> float:
            call.answered(final)
            return handover.finish_timings(t0, final)

        if req.stream:

            def stream_ended() -> None:
                admitted.release()
                call.end_after(waiter.final)

            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            reply = StreamReply(self, env, waiter, req.n or 1, created, deadline_s, include_usage)
            return BoundedStreamingResponse(
                reply.events(finish_timings, stream_ended),
                s.gateway_stream_write_timeout_s,
                media_type="text/event-stream",
                headers={"X-Request-Id": rid, "Cache-Control": "no-cache", **adapter_header(env)},
            )
        try:
            response = await self._reply(env, waiter, created, deadline_s, finish_timings, admitted.release)
        except BaseException as exc:
            call.end(exc)
            raise
        call.end()
        return response

    async def _reply(
        self,
        env: Envelope,
        waiter: Waiter,
        created: int,
        deadline_s: float,
        finish_timings: Callable[[Envelope], float],
        release: Callable[[], None],
    ) -> Response:
        s, rid = self.settings, env.request_id
        try:
            final = await asyncio.wait_for(
                asyncio.shield(waiter.final), timeout=max(0.0, deadline_s - time.time())
            )
        except TimeoutError:
            raise ApiError(
                504, f"request timed out after {s.gateway_timeout_s:g}s", ErrorCode.DEADLINE_EXCEEDED
            ) from None
        finally:
            self.backend.replies.release(rid)
            release()
        if final.error.code:
            raise ApiError(final.error.http_status or 500, final.error.message, final.error.code)
        e2e = finish_timings(final)
        return JSONResponse(
            response_body(final, created, e2e), headers={"X-Request-Id": rid, **adapter_header(final)}
        )
