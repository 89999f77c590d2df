"""The OpenAI-compatible REST API (FastAPI). Kafka stays behind `Backend.submit`."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from switchyard.v1.events_pb2 import StreamDelta

from shared.adapters.refs import parse_ref, ref_from_manifest
from shared.openai.errors import error_body, error_response, error_type
from shared.openai.format import (
    StreamDeduper,
    choice_logprobs,
    chunk,
    reply_model,
    response_body,
    to_envelope,
)
from shared.openai.protocol import AsyncRequest, ChatCompletionRequest, CompletionRequest
from shared.prepare import prompt_texts
from shared.runtime.admission import Admission, Refused, estimate_tokens
from shared.runtime.auth import bearer, tenant_for_key
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, ErrorCode, Kind, Rejected, encode, new_request_id
from shared.runtime.telemetry import IN_FLIGHT, STAGE_SECONDS, add_timing, get_logger, request_span

from .batches import batch_router
from .cache_peek import worth_peeking
from .limits import Slots
from .replies import ReplyRouter, ResultStore
from .rollouts import RolloutStore, rollout_router
from .sse import BoundedStreamingResponse

log = get_logger(__name__)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers


# Room left in a record for its key and headers (trace context, content type, job).
_RECORD_OVERHEAD = 4096


def refuse_oversized(env: Envelope, max_record_bytes: int) -> None:
    """413 before anything is derived from a request the pipeline would refuse: a record over
    SY_MAX_RECORD_BYTES is dead-lettered by the first stage that reads it (issue 32)."""
    size = env.ByteSize()
    if size + _RECORD_OVERHEAD > max_record_bytes:
        raise ApiError(
            413,
            f"request is {size} bytes once encoded; the pipeline takes at most "
            f"{max_record_bytes - _RECORD_OVERHEAD} (SY_MAX_RECORD_BYTES): send images and audio "
            "by object-store URI, or shorten the prompt",
            "request_too_large",
        )


def _error(
    status: int, message: str, code: str, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return error_response("gateway", status, message, code, param, headers)


# peek(serialised envelope, request id, tenant) -> the answered envelope on a cache hit, else None.
Peek = Callable[[bytes, str, str], Awaitable[Envelope | None]]


@dataclass
class Backend:
    """What the API needs from the process: publishing and the reply side."""

    settings: Settings
    # submit(env, topic): to sy.requests, or to `topic` (the stage after preprocess) when prepared here.
    submit: Callable[[Envelope, str | None], Awaitable[None]]
    replies: ReplyRouter
    store: ResultStore
    ready: Callable[[], bool]
    # resolve(tenant, ref) -> manifest dict/model or None; list_adapters(tenant) -> adapter dicts.
    # None: no registry (adapters unknown; only base models are served).
    resolve_adapter: Callable[[str, str], Awaitable[Any]] | None = None
    list_adapters: Callable[[str], Awaitable[list[Any]]] | None = None
    # True once SIGTERM arrived: new requests that wait for replies get 503 + Retry-After.
    draining: Callable[[], bool] = lambda: False
    # The cache's lookup, asked before the request is produced (cache_peek.py); None: no peeking.
    peek: Peek | None = None
    # prepare(env, parent) -> the next topic when the gateway prepared a text request itself, else
    # None (shared/prepare.py: TextPreparer); raises Rejected as preprocess would. None: never.
    prepare: Callable[[Envelope, str], Awaitable[str | None]] | None = None
    # The rollout store the sy.rewards reader fills; None: the routes open their own (no long poll wake-ups).
    rollouts: RolloutStore | None = None
    # Requests held open for their reply (sync and streams), bounded by SY_GATEWAY_MAX_IN_FLIGHT;
    # shutdown waits for them before the reply reader stops.
    in_flight: Slots = field(init=False)

    def __post_init__(self) -> None:
        self.in_flight = Slots(self.settings.gateway_max_in_flight)

    @property
    def models(self) -> list[str]:
        return sorted({m for p in self.settings.pools for m in p.models})


class BodyLimit:
    """413 for bodies over the limit, whether or not the client sent Content-Length."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _error(413, f"request body exceeds {self.limit} bytes", "body_too_large")(
                scope, receive, send
            )
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise ApiError(413, f"request body exceeds {self.limit} bytes", "body_too_large")
            return msg

        await self.app(scope, limited, send)


def create_app(backend: Backend) -> FastAPI:
    s = backend.settings
    app = FastAPI(
        title="Switchyard gateway",
        version="0.1.0",
        description="OpenAI-compatible API of the Switchyard pipeline",
    )

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.code, exc.param, exc.headers)

    @app.exception_handler(Refused)
    async def _refused(_: Request, exc: Refused) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
        return _error(exc.status, exc.message, exc.code, headers=headers)

    @app.exception_handler(Rejected)
    async def _rejected(_: Request, exc: Rejected) -> JSONResponse:
        return _error(exc.http_status, exc.reason, exc.code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(x) for x in first["loc"] if x != "body") or None
        msg = "; ".join(f"{'.'.join(str(x) for x in e['loc'] if x != 'body')}: {e['msg']}" for e in errs[:5])
        return _error(400, msg, "invalid_request", param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(
            exc.status_code, str(exc.detail), "not_found" if exc.status_code == 404 else "http_error"
        )

    admission = Admission(s)
    streams = Slots(s.gateway_max_streams_per_tenant)
    in_flight = backend.in_flight
    IN_FLIGHT.labels("gateway").set_function(lambda: in_flight.used(""))

    async def tenant_of(authorization: str | None = Header(default=None)) -> str:
        """The caller's tenant; every authenticated route counts against the tenant's rate (429)."""
        key = bearer(authorization)
        if key is None:
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", "invalid_api_key")
        tenant = tenant_for_key(s.api_keys, key)
        if tenant is None:
            raise ApiError(401, "invalid API key", "invalid_api_key")
        await admission.request(tenant)
        return tenant

    async def spend_tokens(env: Envelope) -> None:
        """The tenant's token budget: prompt tokens (counted when prepared here, else estimated)
        plus what the request may generate (max_tokens, or the context, times n)."""
        prompt = env.tokens.total or estimate_tokens(sum(len(t.encode()) for t in prompt_texts(env)))
        sampling = env.request.sampling
        gen = sampling.max_tokens if sampling.HasField("max_tokens") else s.vllm_max_model_len
        await admission.tokens(env.tenant, prompt + gen * max(1, sampling.n))

    def admit(tenant: str) -> None:
        """This replica's bound on requests waiting for replies (503); the rate was counted on
        authentication (`tenant_of`)."""
        if not in_flight.take(""):
            raise ApiError(
                503,
                f"gateway overloaded: {s.gateway_max_in_flight} requests already waiting for replies",
                "overloaded",
                headers={"Retry-After": "1"},
            )

    async def resolve(tenant: str, ref: str, missing: ApiError) -> Any:
        """The registry's manifest for `ref` as `tenant` sees it; `missing` when unknown or another
        tenant's private adapter (the answer never confirms it exists); 503 when it is down."""
        if backend.resolve_adapter is None:
            raise missing
        try:
            manifest = await backend.resolve_adapter(tenant, ref)
        except Exception as exc:  # noqa: BLE001 - registry down: say so, don't guess
            log.warning("registry unavailable", error=str(exc))
            raise ApiError(
                503, "the adapter registry is unavailable; retry", "registry_unavailable"
            ) from None
        if manifest is None:
            raise missing
        return manifest

    async def check_model(model: str, tenant: str, env: Envelope | None = None) -> None:
        """A base model, or an adapter the tenant may use; else 404.

        With `env`, the adapter is pinned onto it (`adapter_ref`: name@version, owner, sha256)
        here, before the cache peek, the cache key and the router look at it (DESIGN §6), in both
        forms: `model=<adapter>` and `model=<base>` with `adapter=<adapter>` pin the same ref.
        Another tenant's private adapter is 404 too: the answer never confirms it exists.
        """
        if env is not None:
            env.ClearField("adapter_ref")  # only what is resolved here is trusted
        if model in backend.models:
            if env is not None and env.adapter:
                await pin_adapter_field(env, tenant)
            return
        missing = ApiError(404, f"The model '{model}' does not exist", "model_not_found", "model")
        try:
            parse_ref(model)
        except ValueError:
            raise missing from None
        if env is not None and env.adapter and env.adapter != model:
            raise ApiError(
                400,
                f"model {model!r} is not a base model: name the adapter in model or in adapter, not both",
                "invalid_request",
                "adapter",
            )
        manifest = await resolve(tenant, model, missing)
        if env is not None:
            pinned = ref_from_manifest(manifest, model)
            env.model, env.adapter = pinned.base_model, model
            env.adapter_ref.CopyFrom(pinned)

    async def pin_adapter_field(env: Envelope, tenant: str) -> None:
        """`model=<base>, adapter=<name[@version|alias]>`: resolved as the tenant, for that base."""
        ref = env.adapter
        try:
            parse_ref(ref)
        except ValueError as exc:
            raise ApiError(400, str(exc), "invalid_request", "adapter") from None
        missing = ApiError(404, f"adapter {ref!r} does not exist", ErrorCode.ADAPTER_NOT_FOUND, "adapter")
        pinned = ref_from_manifest(await resolve(tenant, ref, missing), ref)
        if pinned.base_model != env.model:
            raise ApiError(
                400,
                f"adapter {ref!r} is for base model {pinned.base_model!r}, not {env.model!r}",
                "invalid_request",
                "adapter",
            )
        env.adapter_ref.CopyFrom(pinned)

    def check_ready() -> None:
        if backend.draining():
            raise ApiError(503, "gateway is shutting down; retry", "draining", headers={"Retry-After": "1"})
        if not backend.ready():
            raise ApiError(503, "gateway is not ready", "not_ready")

    async def run(req: ChatCompletionRequest | CompletionRequest, tenant: str, request: Request) -> Any:
        t0 = time.time_ns()
        check_ready()
        if req.stream and streams.used(tenant) >= streams.limit:
            raise ApiError(
                429,
                f"{streams.limit} streams already open for this tenant",
                "too_many_streams",
                headers={"Retry-After": "1"},
            )
        admit(tenant)
        done = False

        def release() -> None:
            """Give back the in-flight slot (and the stream slot) once, whichever path ends first."""
            nonlocal done
            if not done:
                done = True
                in_flight.give("")
                if req.stream:
                    streams.give(tenant)

        if req.stream:
            streams.take(tenant)
        try:
            return await _run(req, tenant, t0, release, request)
        except BaseException:
            release()
            raise

    peeks: set[asyncio.Task[None]] = set()
    late_submits: set[asyncio.Future[None]] = set()

    def submitted_late(fut: asyncio.Future[None]) -> None:
        """The record of a request a peek already answered: nobody waits for it, so say if it failed."""
        late_submits.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("request record not produced after a peek answered it", error=repr(fut.exception()))

    async def peek_cache(peek: Peek, request: bytes, rid: str, tenant: str) -> None:
        """A hit answers the waiter now; a pipeline answer, if the request was produced, is a duplicate."""
        hit = await peek(request, rid, tenant)
        if hit is not None:
            backend.replies.on_response(hit, 0)

    async def _run(
        req: ChatCompletionRequest | CompletionRequest,
        tenant: str,
        t0: int,
        release: Callable[[], None],
        request: Request,
    ) -> Any:
        """Admitted: the slots are held until the reply is sent or the stream ends (`release`)."""
        rid = new_request_id()
        created = int(time.time())
        deadline_s = time.time() + s.gateway_timeout_s
        env = to_envelope(req, request_id=rid, tenant=tenant, deadline_unix_ms=int(deadline_s * 1000))
        await check_model(req.model, tenant, env)
        # A text request is prepared here and goes past preprocess (shared/prepare.py: one hop
        # fewer); media goes through sy.requests. Refusals (context length) answer at once.
        refuse_oversized(env, s.max_record_bytes)
        topic = await backend.prepare(env, "gateway_accept") if backend.prepare is not None else None
        await spend_tokens(env)
        n = req.n or 1
        waiter = backend.replies.register(rid, tenant, stream=req.stream)
        handed = time.time_ns()
        peeking = backend.peek is not None and worth_peeking(env, s)
        held_until = 0
        submitted: asyncio.Future[None] | None = None
        try:
            with request_span("gateway", request.headers, t0, request_id=rid, tenant=tenant):
                if peeking:
                    assert backend.peek is not None
                    peek_task = asyncio.create_task(
                        peek_cache(backend.peek, env.SerializeToString(), rid, tenant)
                    )
                    peeks.add(peek_task)  # a reference until it ends (the loop keeps only weak ones)
                    peek_task.add_done_callback(peeks.discard)
                    if s.cache_peek_hold_ms > 0:
                        # A hit within the hold is answered and never produced (no pipeline run at
                        # all); a miss goes on with its lookup done. Past the hold the record goes
                        # out and the peek goes on beside it (cache_peek.py).
                        await asyncio.wait({peek_task}, timeout=s.cache_peek_hold_ms / 1000)
                        held_until = time.time_ns()
                if not (peeking and waiter.final.done()):
                    submitted = asyncio.ensure_future(backend.submit(env, topic))
                    if peeking:
                        # A later peek hit is the answer too: the reply does not wait for the
                        # broker's ack of a record whose own answer will be a duplicate (still sent).
                        await asyncio.wait({submitted, waiter.final}, return_when=asyncio.FIRST_COMPLETED)
                    if submitted.done() or not waiter.final.done():
                        await submitted
                    else:
                        late_submits.add(submitted)
                        submitted.add_done_callback(submitted_late)
        except Exception:
            backend.replies.release(rid)
            raise

        def finish_timings(final: Envelope) -> float:
            add_timing(final, "gateway_accept", t0, handed)
            if held_until and submitted is not None and all(t.stage != "cache_peek" for t in final.timings):
                add_timing(
                    final, "gateway_peek_hold", handed, held_until
                )  # the pipeline's answer: held first
            if waiter.sent_ns:
                add_timing(
                    final,
                    "queue",
                    waiter.sent_ns,
                    waiter.received_ns,
                    topic=s.topic("responses"),
                    to="gateway",
                )
            add_timing(final, "gateway_reply", waiter.received_ns or time.time_ns(), time.time_ns())
            e2e = (time.time_ns() - t0) / 1e6
            STAGE_SECONDS.labels("gateway").observe(e2e / 1000)
            return e2e

        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return BoundedStreamingResponse(
                _sse(env, waiter, n, created, deadline_s, include_usage, finish_timings, release),
                s.gateway_stream_write_timeout_s,
                media_type="text/event-stream",
                headers={"X-Request-Id": rid, "Cache-Control": "no-cache", **adapter_header(env)},
            )
        try:
            final = await asyncio.wait_for(
                asyncio.shield(waiter.final), timeout=max(0.0, deadline_s - time.time())
            )
        except TimeoutError:
            raise ApiError(
                504, f"request timed out after {s.gateway_timeout_s:g}s", ErrorCode.DEADLINE_EXCEEDED
            ) from None
        finally:
            backend.replies.release(rid)
            release()
        if final.error.code:
            raise ApiError(final.error.http_status or 500, final.error.message, final.error.code)
        e2e = finish_timings(final)
        return JSONResponse(
            response_body(final, created, e2e), headers={"X-Request-Id": rid, **adapter_header(final)}
        )

    async def _sse(
        env: Envelope,
        waiter: Any,
        n: int,
        created: int,
        deadline_s: float,
        include_usage: bool,
        finish_timings: Callable[[Envelope], float],
        release: Callable[[], None],
    ) -> AsyncIterator[bytes]:
        rid, kind, model = env.request_id, env.kind, reply_model(env)

        def event(obj: dict[str, Any]) -> bytes:
            return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()

        dedupe = StreamDeduper(n)

        def parts(delta: StreamDelta) -> Iterator[bytes]:
            """A delta's new text and, when asked for, its tokens' logprobs, deduped per choice."""
            texts = dict(dedupe.new_text(delta))
            lps = dedupe.new_logprobs(delta) if env.request.sampling.logprobs else {}
            for index in sorted(texts.keys() | lps.keys()):
                lp = choice_logprobs(env, *lps[index]) if index in lps else None
                yield event(chunk(kind, rid, model, created, index, text=texts.get(index, ""), logprobs=lp))

        try:
            if kind != Kind.KIND_COMPLETION:
                for i in range(n):
                    yield event(chunk(kind, rid, model, created, i, role=True))
            while not waiter.final.done():
                timeout = deadline_s - time.time()
                if timeout <= 0:
                    yield event(
                        error_body(
                            f"request timed out after {s.gateway_timeout_s:g}s",
                            "timeout_error",
                            ErrorCode.DEADLINE_EXCEEDED,
                        )
                    )
                    yield b"data: [DONE]\n\n"
                    return
                getter = asyncio.ensure_future(waiter.deltas.get())
                await asyncio.wait(
                    [getter, waiter.final], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if not getter.done():
                    getter.cancel()
                    continue
                for ev in parts(getter.result()):
                    yield ev
            while not waiter.deltas.empty():
                for ev in parts(waiter.deltas.get_nowait()):
                    yield ev
            final: Envelope = waiter.final.result()
            if final.error.code:
                yield event(
                    error_body(
                        final.error.message,
                        error_type(final.error.http_status),
                        final.error.code,
                    )
                )
                yield b"data: [DONE]\n\n"
                return
            for c in final.response.choices:
                rest = dedupe.remainder(c.index, c.text)
                lp = None
                if env.request.sampling.logprobs:
                    missed, offset = dedupe.remaining_logprobs(c.index, c.token_logprobs)
                    lp = choice_logprobs(env, missed, offset) if missed else None
                if rest or lp:
                    yield event(chunk(kind, rid, model, created, c.index, text=rest, logprobs=lp))
                yield event(
                    chunk(kind, rid, model, created, c.index, finish_reason=c.finish_reason or "stop")
                )
            e2e = finish_timings(final)
            if include_usage:
                body = response_body(final, created, e2e)
                tail = chunk(kind, rid, model, created, 0)
                tail["choices"] = []
                tail["usage"] = body["usage"]
                tail["switchyard"] = body["switchyard"]
                yield event(tail)
            yield b"data: [DONE]\n\n"
        finally:
            backend.replies.release(rid)
            release()

    @app.post("/v1/chat/completions")
    async def chat_completions(
        req: ChatCompletionRequest, request: Request, tenant: str = Depends(tenant_of)
    ) -> Any:
        """Create a chat completion (OpenAI-compatible; `stream: true` for SSE)."""
        return await run(req, tenant, request)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request, tenant: str = Depends(tenant_of)) -> Any:
        """Create a text completion (OpenAI-compatible)."""
        return await run(req, tenant, request)

    @app.get("/v1/models")
    async def models(tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        """Base models, then the adapters this tenant may use (with `parent`, as vLLM lists LoRAs)."""
        data: list[dict[str, Any]] = [
            {"id": m, "object": "model", "created": 0, "owned_by": "switchyard", "root": m, "parent": None}
            for m in backend.models
        ]
        if backend.list_adapters is not None:
            try:
                adapters = await backend.list_adapters(tenant)
            except Exception as exc:  # noqa: BLE001 - base models are still worth listing
                log.warning("registry unavailable; listing base models only", error=str(exc))
                adapters = []
            for a in adapters:  # shared.adapters.registry_client.Adapter
                latest = a.versions[-1] if a.versions else None
                data.append(
                    {
                        "id": a.name,
                        "object": "model",
                        "created": latest.created_unix_ns // 1_000_000_000 if latest else 0,
                        "owned_by": a.owner,
                        "root": a.name,
                        "parent": latest.base_model if latest else None,
                    }
                )
        return {"object": "list", "data": data}

    @app.post("/v1/requests", status_code=202)
    async def submit_async(
        body: AsyncRequest,
        request: Request,
        tenant: str = Depends(tenant_of),
        idempotency_key: str | None = Header(default=None),
    ) -> JSONResponse:
        """Queue a request; poll GET /v1/requests/{id}. Retrying with the same request_id is safe."""
        check_ready()
        model_cls = ChatCompletionRequest if body.endpoint == "/v1/chat/completions" else CompletionRequest
        try:
            req = model_cls(**body.body)
        except ValidationError as exc:
            e = exc.errors()[0]
            loc = ".".join(str(x) for x in e["loc"])
            raise ApiError(400, f"body.{loc}: {e['msg']}", "invalid_request", f"body.{loc}") from None
        if req.stream:
            raise ApiError(
                400, "stream is not available for async requests", "invalid_request", "body.stream"
            )
        key = body.request_id or idempotency_key
        env = to_envelope(req, request_id=new_request_id(), tenant=tenant, deadline_unix_ms=0)
        await check_model(req.model, tenant, env)
        if key is None or not backend.store.has_key(tenant, key):  # a retry spends no tokens twice
            await spend_tokens(env)
        # The quota check and the accept with no await between: concurrent requests of one
        # tenant cannot all pass the check (one event loop per replica).
        if (key is None or not backend.store.has_key(tenant, key)) and backend.store.queued(
            tenant
        ) >= s.tenant_max_queued:
            raise ApiError(
                429,
                f"{s.tenant_max_queued} async requests already queued for this tenant "
                "(SY_TENANT_MAX_QUEUED): wait for some to finish",
                "too_many_queued",
                headers={"Retry-After": "5"},
            )
        rid, new = backend.store.accept(env.request_id, tenant, body.endpoint, key, encode(env))
        if new:
            try:
                with request_span("gateway", request.headers, time.time_ns(), request_id=rid, tenant=tenant):
                    await backend.submit(env, None)
            except Exception:
                backend.store.forget(rid)
                raise
            backend.store.submitted(rid)
        current = backend.store.get(rid, tenant) or {}
        return JSONResponse(current, status_code=202 if current.get("status") == "queued" else 200)

    @app.get("/v1/requests/{request_id}")
    async def get_request(request_id: str, tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        """Status, result and per-stage breakdown of an async request."""
        found = backend.store.get(request_id, tenant)
        if found is None:
            raise ApiError(404, f"no request {request_id!r}", "not_found")
        return found

    app.include_router(
        rollout_router(
            s, backend.submit, tenant_of, check_model, check_ready, ApiError, backend.rollouts, admission
        )
    )
    app.include_router(batch_router(s, tenant_of))  # /v1/files, /v1/batches (services/batch runs them)
    return app


def adapter_header(env: Envelope) -> dict[str, str]:
    """`X-Switchyard-Adapter: name@version`, the adapter version that answered (also the body's
    `switchyard.adapter`); nothing for the base model."""
    ref = env.adapter_ref
    return {"X-Switchyard-Adapter": f"{ref.name}@{ref.version}"} if ref.name else {}


def async_result(env: Envelope) -> tuple[str, dict[str, Any]]:
    """What GET /v1/requests/{id} shows for a finished envelope."""
    if env.error.code:
        return "failed", {"error": error_body(env.error.message, "server_error", env.error.code)["error"]}
    return "completed", {"result": response_body(env, int(time.time()))}
