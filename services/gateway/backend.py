"""What the API needs from the process (publishing, the reply side, the registry), as one object."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.telemetry import get_logger

from .limits import Slots
from .replies import ReplyRouter
from .requests.store import ResultStore
from .rollouts.claims import RolloutClaims
from .rollouts.store import RolloutStore
from .stream_slots import SharedStreams

log = get_logger(__name__)

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
    # Rollout ids shared by the replicas (Redis; None: this replica alone decides).
    rollout_claims: RolloutClaims | None = None
    # Streams per tenant counted over every replica (Redis); None: this replica counts its own.
    stream_slots: SharedStreams | None = None
    # Requests held open for their reply (sync and streams), bounded by SY_GATEWAY_MAX_IN_FLIGHT;
    # shutdown waits for them before the reply reader stops.
    in_flight: Slots = field(init=False)

    def __post_init__(self) -> None:
        self.in_flight = Slots(self.settings.gateway_max_in_flight)

    @property
    def models(self) -> list[str]:
        return sorted({m for p in self.settings.pools for m in p.models})

    async def open_requests_answered(self) -> None:
        """SIGTERM: requests held open get their replies (the reply reader still runs) before
        the reader stops; new ones are refused with 503 meanwhile. Async ones need no wait: they
        are in the accepted log and any gateway answers them."""
        if self.in_flight.used(""):
            log.info("waiting for open requests", n=self.in_flight.used(""))
        while self.in_flight.used(""):  # noqa: ASYNC110 - a counter the API shares; polled
            await asyncio.sleep(0.05)
