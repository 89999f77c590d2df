"""Rollout ids shared by the gateway replicas (Redis): a retry on any replica is the same job.

Each replica keeps rollouts in its own RolloutStore, filled from sy.rewards; between a POST on one
replica and the job's first records on sy.rewards another replica would not know the id. So the
replica that accepts a rollout claims its id here first (SET NX, for SY_ROLLOUT_QUOTA_WINDOW_S),
with what its store needs (accepted time, groups, group size, policy). Another replica that
gets the id (a retry, a GET) copies that into its own store: the retry is not sent again and
the GET finds the job at once.
"""

from __future__ import annotations

import json
from typing import Any

from redis import asyncio as aioredis

from shared.runtime.envelope import Envelope, Kind

_KEY = "sy:gw:rollout:"


class RolloutClaims:
    def __init__(self, url: str, ttl_s: float) -> None:
        self._r = aioredis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self._ttl = max(1, int(ttl_s))

    @staticmethod
    def _key(tenant: str, rollout_id: str) -> str:
        return f"{_KEY}{tenant}:{rollout_id}"  # tenant names have no ':'

    async def claim(self, env: Envelope, policy: dict[str, Any]) -> bool:
        """True when this replica is the first to accept the tenant's rollout id."""
        r = env.rollout
        value = json.dumps(
            {
                "accepted_ns": r.accepted_unix_ns,
                "groups": r.num_groups,
                "size": r.group_size,
                "policy": policy,
            }
        )
        return bool(await self._r.set(self._key(env.tenant, r.rollout_id), value, nx=True, ex=self._ttl))

    async def release(self, tenant: str, rollout_id: str) -> None:
        """The job never reached the topic: a retry may submit it again."""
        await self._r.delete(self._key(tenant, rollout_id))

    async def find(self, tenant: str, rollout_id: str) -> tuple[Envelope, dict[str, Any]] | None:
        """What another replica accepted under this id, as RolloutStore.accept takes it."""
        raw = await self._r.get(self._key(tenant, rollout_id))
        if raw is None:
            return None
        got = json.loads(raw)
        env = Envelope(tenant=tenant, kind=Kind.KIND_ROLLOUT)
        env.rollout.rollout_id = rollout_id
        env.rollout.accepted_unix_ns = int(got["accepted_ns"])
        env.rollout.num_groups = int(got["groups"])
        env.rollout.group_size = int(got["size"])
        return env, dict(got["policy"])

    async def close(self) -> None:
        await self._r.aclose()
