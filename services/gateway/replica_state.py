"""What gateway replicas share in Redis (SY_GATEWAY_STATE_URL): the reply partition each one
reads, and rollout ids claimed across replicas. Without it, one gateway reads every reply
partition and claims rollouts in its own store (docs/scaling.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from shared.runtime.config import Settings

from .reply_lease import ReplyLease
from .rollouts.claims import RolloutClaims


@dataclass(slots=True)
class ReplicaState:
    """The lease and claims of one replica; both None when the gateway runs alone."""

    settings: Settings
    lease: ReplyLease | None = None
    claims: RolloutClaims | None = None
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
    return ReplicaState(settings, lease, claims, [lease.close, claims.close])
