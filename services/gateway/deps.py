"""Admission as FastAPI dependencies: who calls (auth, the tenant's rate), whether this replica
takes the request (readiness, open streams, requests in flight), the tenant's token budget.

The state lives in one `Gate` on `app.state.gate`; the dependencies only read it from there.
Quotas checked together with an accept (queued async requests, unfinished rollouts) stay in the
serving code: the check and the accept run with no await between them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Generic, TypeVar, cast

from fastapi import Depends, Header, Request
from pydantic import BaseModel

from shared.openai.protocol import ChatCompletionRequest, CompletionRequest
from shared.prepare import prompt_texts
from shared.runtime.admission import Admission, estimate_tokens
from shared.runtime.auth import bearer, tenant_for_key
from shared.runtime.envelope import Envelope

from .backend import Backend
from .errors import ApiError
from .limits import Slots


class Ticket:
    """The slots one admitted request holds (in flight, and a stream slot for streams)."""

    def __init__(self, gate: Gate, tenant: str, stream_slot: str | None) -> None:
        self.gate, self.tenant, self.stream_slot, self.done = gate, tenant, stream_slot, False

    def release(self) -> None:
        """Give back the in-flight slot (and the stream slot) once, whichever path ends first."""
        if not self.done:
            self.done = True
            self.gate.in_flight.give("")
            if self.stream_slot is not None:
                self.gate.give_stream(self.tenant, self.stream_slot)


class Gate:
    """The admission state of one gateway replica."""

    def __init__(self, backend: Backend) -> None:
        self.backend, self.settings = backend, backend.settings
        self.admission = Admission(self.settings)
        self.streams = Slots(self.settings.gateway_max_streams_per_tenant)
        self.in_flight = backend.in_flight

    async def tenant(self, authorization: str | None) -> str:
        """The caller's tenant; every authenticated route counts against the tenant's rate (429)."""
        key = bearer(authorization)
        if key is None:
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", "invalid_api_key")
        tenant = tenant_for_key(self.settings.api_keys, key)
        if tenant is None:
            raise ApiError(401, "invalid API key", "invalid_api_key")
        await self.admission.request(tenant)
        return tenant

    def check_ready(self) -> None:
        if self.backend.draining():
            raise ApiError(503, "gateway is shutting down; retry", "draining", headers={"Retry-After": "1"})
        if not self.backend.ready():
            raise ApiError(503, "gateway is not ready", "not_ready")

    async def admit(self, tenant: str, stream: bool) -> Ticket:
        """Ready, a stream slot (429; counted over every replica when they share a Redis), then
        this replica's bound on requests waiting for replies (503); the rate was counted on
        authentication (`tenant`)."""
        self.check_ready()
        slot = await self._take_stream(tenant) if stream else None
        if not self.in_flight.take(""):
            if slot is not None:
                self.give_stream(tenant, slot)
            raise ApiError(
                503,
                f"gateway overloaded: {self.settings.gateway_max_in_flight} requests already waiting for replies",
                "overloaded",
                headers={"Retry-After": "1"},
            )
        return Ticket(self, tenant, slot)

    async def _take_stream(self, tenant: str) -> str:
        shared = self.backend.stream_slots
        slot = (
            await shared.take(tenant) if shared is not None else ("" if self.streams.take(tenant) else None)
        )
        if slot is None:
            raise ApiError(
                429,
                f"{self.streams.limit} streams already open for this tenant",
                "too_many_streams",
                headers={"Retry-After": "1"},
            )
        return slot

    def give_stream(self, tenant: str, slot: str) -> None:
        shared = self.backend.stream_slots
        if shared is not None:
            shared.give(tenant, slot)
        else:
            self.streams.give(tenant)

    async def spend_tokens(self, env: Envelope) -> None:
        """The tenant's token budget: prompt tokens (counted when prepared here, else estimated)
        plus what the request may generate (max_tokens, or the context, times n)."""
        prompt = env.tokens.total or estimate_tokens(sum(len(t.encode()) for t in prompt_texts(env)))
        sampling = env.request.sampling
        gen = sampling.max_tokens if sampling.HasField("max_tokens") else self.settings.vllm_max_model_len
        await self.admission.tokens(env.tenant, prompt + gen * max(1, sampling.n))


T = TypeVar("T")


def state_of(request: Request, name: str, kind: type[T]) -> T:
    """`app.state.<name>` as the `kind` create_app put there: the routes' one typed way to the
    objects they serve from (app.state itself is untyped)."""
    return cast(T, getattr(request.app.state, name))


def gate_of(request: Request) -> Gate:
    return state_of(request, "gate", Gate)


async def tenant_of(request: Request, authorization: str | None = Header(default=None)) -> str:
    """The caller's tenant (401 without a known key); counts against the tenant's rate (429)."""
    return await gate_of(request).tenant(authorization)


Tenant = Annotated[str, Depends(tenant_of)]

B = TypeVar("B", bound=BaseModel)


def ready_after_body(model: type[B]) -> Callable[..., Awaitable[tuple[B, str]]]:
    """A dependency answering (body, tenant): authenticated (401), the body a valid `model` (400),
    then this replica ready (503). FastAPI solves a route's dependencies before its body, so a
    plain readiness dependency would answer 503 to a body that can never pass; this one takes
    the body itself, which FastAPI validates before calling it."""

    async def admit(body: B, request: Request, tenant: Tenant) -> tuple[B, str]:
        gate_of(request).check_ready()
        return body, tenant

    admit.__annotations__["body"] = model  # what FastAPI reads the body's schema from
    return admit


R = TypeVar("R", ChatCompletionRequest, CompletionRequest)


@dataclass
class Admitted(Generic[R]):
    """A generation request past admission: its slots are held until `release`."""

    req: R
    tenant: str
    t0: int
    release: Callable[[], None]


async def _admitted(gate: Gate, req: R, tenant: str) -> Admitted[R]:
    t0 = time.time_ns()
    return Admitted(req, tenant, t0, (await gate.admit(tenant, req.stream)).release)


async def admit_chat(
    req: ChatCompletionRequest, request: Request, tenant: Tenant
) -> Admitted[ChatCompletionRequest]:
    """Authenticated, the body valid (400 first), then admitted."""
    return await _admitted(gate_of(request), req, tenant)


async def admit_completion(
    req: CompletionRequest, request: Request, tenant: Tenant
) -> Admitted[CompletionRequest]:
    return await _admitted(gate_of(request), req, tenant)
