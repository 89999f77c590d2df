"""Async requests (POST /v1/requests, GET /v1/requests/{id}): accepted into the result store,
produced, answered by whichever gateway reads the reply (replies.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import ValidationError
from starlette.datastructures import Headers

from shared.openai.errors import error_body
from shared.openai.format import response_body, to_envelope
from shared.openai.protocol import AsyncRequest, ChatCompletionRequest, CompletionRequest
from shared.runtime.envelope import Envelope, encode, new_request_id
from shared.runtime.genai import request_attributes
from shared.runtime.telemetry import get_logger, request_span

from ..backend import Backend
from ..deps import Gate
from ..errors import ApiError
from ..models.serving import ModelCatalog
from .store import STORE_ERRORS, QueueFull

log = get_logger(__name__)


def async_result(env: Envelope) -> tuple[str, dict[str, Any]]:
    """What GET /v1/requests/{id} shows for a finished envelope."""
    if env.error.code:
        return "failed", {"error": error_body(env.error.message, "server_error", env.error.code)["error"]}
    return "completed", {"result": response_body(env, int(time.time()))}


def parse_body(body: AsyncRequest) -> ChatCompletionRequest | CompletionRequest:
    """The inner OpenAI body, validated as its endpoint's (400 naming `body.<field>`)."""
    model_cls = ChatCompletionRequest if body.endpoint == "/v1/chat/completions" else CompletionRequest
    try:
        req = model_cls(**body.body)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise ApiError(400, f"body.{loc}: {e['msg']}", "invalid_request", f"body.{loc}") from None
    if req.stream:
        raise ApiError(400, "stream is not available for async requests", "invalid_request", "body.stream")
    return req


@asynccontextmanager
async def store_answers() -> AsyncIterator[None]:
    """A store that cannot answer is a 503 to retry, never a 500 (nor a request half taken)."""
    try:
        yield
    except STORE_ERRORS as exc:
        log.warning("request store unavailable", error=repr(exc))
        raise ApiError(503, "the request store is unavailable; retry", "store_unavailable") from None


class AsyncRequests:
    def __init__(self, backend: Backend, gate: Gate, models: ModelCatalog) -> None:
        self.backend, self.gate, self.models, self.settings = backend, gate, models, backend.settings

    async def submit(
        self, body: AsyncRequest, tenant: str, idempotency_key: str | None, headers: Headers
    ) -> dict[str, Any]:
        """Queue a request; a retry with the same key returns the one already accepted."""
        async with store_answers():
            return await self._submit(body, tenant, idempotency_key, headers)

    async def _submit(
        self, body: AsyncRequest, tenant: str, idempotency_key: str | None, headers: Headers
    ) -> dict[str, Any]:
        s, store = self.settings, self.backend.store
        req = parse_body(body)
        key = body.request_id or idempotency_key
        if key is not None:
            prior = await store.existing(tenant, key)
            if prior is not None:  # a retry, on this replica or another: the request already accepted
                return await store.get(prior, tenant) or {}
        env = to_envelope(req, request_id=new_request_id(), tenant=tenant, deadline_unix_ms=0)
        await self.models.check(req.model, tenant, env)
        await self.gate.spend_tokens(env)
        try:
            # Key, quota and insert in one step of the store: concurrent requests on any replicas
            # cannot all pass the quota or both take one key.
            rid, new = await store.accept(
                env.request_id, tenant, body.endpoint, key, encode(env), s.tenant_max_queued
            )
        except QueueFull:
            raise ApiError(
                429,
                f"{s.tenant_max_queued} async requests already queued for this tenant "
                "(SY_TENANT_MAX_QUEUED): wait for some to finish",
                "too_many_queued",
                headers={"Retry-After": "5"},
            ) from None
        if new:
            try:
                with request_span("gateway", headers, time.time_ns(), request_id=rid, tenant=tenant) as span:
                    # The request's side only: the answer may be read on another replica, later.
                    if span.is_recording():
                        span.set_attributes(request_attributes(env))
                    await self.backend.submit(env, None)
            except Exception:
                await store.forget(rid, tenant)
                raise
            await store.submitted(rid, tenant)
        return await store.get(rid, tenant) or {}

    async def get(self, request_id: str, tenant: str) -> dict[str, Any]:
        """By the id the gateway gave, or by the client's own request_id (tenant-scoped)."""
        async with store_answers():
            found = await self.backend.store.get(request_id, tenant)
        if found is None:
            raise ApiError(
                404,
                f"no request {request_id!r} for this tenant (neither a request id nor your own request_id)",
                "not_found",
            )
        return found
