"""What gateway replicas share in Redis (SY_GATEWAY_STATE_URL): the reply partition each one
reads, rollout ids (and the unfinished-rollouts quota) claimed across replicas, and the open
streams per tenant. Without it, one gateway reads every reply partition and counts rollouts and
streams itself (docs/scaling.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from shared.runtime.config import Settings

from .reply_lease import ReplyLease
from .rollouts.claims import RolloutClaims
from .stream_slots import SharedStreams


@dataclass(slots=True)
class ReplicaState:
    """The lease, claims and stream slots of one replica; all None when the gateway runs alone."""

    settings: Settings
    lease: ReplyLease | None = None
    claims: RolloutClaims | None = None
    streams: SharedStreams | None = None
    background: list[Callable[[asyncio.Event], Awaitable[None]]] = field(default_factory=list)
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def reply_to(self) -> str:
        """`<responses topic>:<home partition>` once leased; empty means any partition (by key)."""
        return self.lease.reply_to(self.settings.topic("responses")) if self.lease is not None else ""


def open_replica_state(settings: Settings) -> ReplicaState:
    url = settings.gateway_state_url
    if not url:
        return ReplicaState(settings)
    lease = ReplyLease(url, settings.instance_id)
    claims = RolloutClaims(url, settings.rollout_quota_window_s)
    streams = SharedStreams(url, settings.instance_id, settings.gateway_max_streams_per_tenant)
    return ReplicaState(
        settings, lease, claims, streams, [streams.run], [lease.close, claims.close, streams.close]
    )
