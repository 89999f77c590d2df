"""Rollout ids shared by the gateway replicas (Redis): a retry on any replica is the same job.

Each replica keeps rollouts in its own RolloutStore, filled from sy.rewards; between a POST on one
replica and the job's first records on sy.rewards another replica would not know the id. So the
replica that accepts a rollout claims its id here first (SET NX, for SY_ROLLOUT_QUOTA_WINDOW_S),
with what its store needs (accepted time, groups, group size, policy). Another replica that
gets the id (a retry, a GET) copies that into its own store: the retry is not sent again and
the GET finds the job at once.

The tenant's quota of unfinished rollouts (SY_TENANT_MAX_ROLLOUTS) is counted here too, in the
same script as the claim: a sorted set of the tenant's open rollout ids scored by acceptance
time. Every replica reads sy.rewards and removes a rollout from it once it completed or failed
(`finished`); one older than SY_ROLLOUT_QUOTA_WINDOW_S stops counting, as in a replica's store.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from redis import asyncio as aioredis

from shared.runtime.envelope import Envelope, Kind

_KEY = "sy:gw:rollout:"
_OPEN = "sy:gw:rollouts-open:"

# KEYS[1] the claim, KEYS[2] the tenant's open set; ARGV: claim value, ttl s, accepted s,
# window start s, quota, rollout id. 1 claimed, 0 another replica's id, -1 over the quota.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -1 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""


class Claim(Enum):
    OURS = 1
    TAKEN = 0  # another replica accepted this id: its job
    OVER_QUOTA = -1  # the tenant has SY_TENANT_MAX_ROLLOUTS unfinished already


class RolloutClaims:
    def __init__(self, url: str, ttl_s: float) -> None:
        self._r = aioredis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self._claim = self._r.register_script(_CLAIM)
        self._ttl = max(1, int(ttl_s))

    @staticmethod
    def _key(tenant: str, rollout_id: str) -> str:
        return f"{_KEY}{tenant}:{rollout_id}"  # tenant names have no ':'

    async def claim(self, env: Envelope, policy: dict[str, Any], quota: int) -> Claim:
        """Whether this replica is the first to accept the tenant's rollout id, within the
        tenant's quota of unfinished rollouts over every replica."""
        r = env.rollout
        value = json.dumps(
            {
                "accepted_ns": r.accepted_unix_ns,
                "groups": r.num_groups,
                "size": r.group_size,
                "policy": policy,
            }
        )
        accepted_s = r.accepted_unix_ns / 1e9
        got = await self._claim(
            keys=[self._key(env.tenant, r.rollout_id), _OPEN + env.tenant],
            args=[value, self._ttl, accepted_s, accepted_s - self._ttl, quota, r.rollout_id],
        )
        return Claim(int(got))

    async def release(self, tenant: str, rollout_id: str) -> None:
        """The job never reached the topic: a retry may submit it again."""
        await self._r.delete(self._key(tenant, rollout_id))
        await self._r.zrem(_OPEN + tenant, rollout_id)

    async def finished(self, rollouts: list[tuple[str, str]]) -> None:
        """These (tenant, rollout id)s completed or failed: they leave their tenant's quota."""
        if rollouts:
            async with self._r.pipeline(transaction=False) as pipe:
                for tenant, rollout_id in rollouts:
                    pipe.zrem(_OPEN + tenant, rollout_id)
                await pipe.execute()

    async def unfinished(self, tenant: str) -> int:
        """The tenant's rollouts counted against its quota now (for tests and operators)."""
        return int(await self._r.zcard(_OPEN + tenant))

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
