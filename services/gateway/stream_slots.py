"""Open streams per tenant, counted across gateway replicas in Redis (SY_GATEWAY_STATE_URL).

A tenant allowed N streams (SY_GATEWAY_MAX_STREAMS_PER_TENANT) gets N in total, not N per
replica. Each open stream is a member of the tenant's sorted set, scored by when its lease runs
out (Redis' own clock, so replicas' clocks need not agree); the replica holding the stream renews
it every few seconds and removes it when the stream ends. A replica that dies without giving its
slots back loses them when their leases run out. While Redis does not answer, each replica counts
its own streams against the same limit (and says so in its log), rather than refusing them all.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets

from redis import asyncio as aioredis

from shared.runtime.telemetry import get_logger

from .limits import Slots

log = get_logger(__name__)

_KEY = "sy:gw:streams:"
LEASE_S = 15
RENEW_S = 5

# KEYS[1] the tenant's set; ARGV: member, limit, lease seconds. 1 taken, 0 at the limit.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
return 1
"""

# KEYS: the tenants' sets; ARGV[1] lease seconds, then one member per key (an ended stream's
# member is not added back: XX).
_RENEW = """
local t = redis.call('TIME')
local until_s = tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', until_s, ARGV[i + 1])
  redis.call('EXPIRE', key, math.ceil(tonumber(ARGV[1])) + 1)
end
return #KEYS
"""


class SharedStreams:
    """Stream slots of every replica in one Redis; `take` answers the slot's id, or None at the limit."""

    def __init__(self, url: str, replica: str, limit: int, lease_s: float = LEASE_S) -> None:
        self._r = aioredis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self._take = self._r.register_script(_TAKE)
        self._renew = self._r.register_script(_RENEW)
        # Two replicas started with one SY_INSTANCE_ID still hold distinct slots.
        self.limit, self.lease_s, self.replica = limit, lease_s, f"{replica}-{secrets.token_hex(3)}"
        self._ids = itertools.count()
        self._held: dict[str, str] = {}  # slot id -> tenant
        self._local = Slots(limit)  # while Redis does not answer
        self._tasks: set[asyncio.Task[None]] = set()

    async def take(self, tenant: str) -> str | None:
        slot = f"{self.replica}:{next(self._ids)}"
        try:
            got = await self._take(keys=[_KEY + tenant], args=[slot, self.limit, self.lease_s])
        except aioredis.RedisError as exc:
            log.warning("stream slots counted per replica: Redis unavailable", error=repr(exc))
            return f"local:{slot}" if self._local.take(tenant) else None
        if not got:
            return None
        self._held[slot] = tenant
        return slot

    def give(self, tenant: str, slot: str) -> None:
        """The stream ended: its slot goes back (in the background; the lease is the backstop)."""
        if slot.startswith("local:"):
            self._local.give(tenant)
            return
        if self._held.pop(slot, None) is None:
            return
        task = asyncio.get_running_loop().create_task(self._remove(tenant, slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove(self, tenant: str, slot: str) -> None:
        try:
            await self._r.zrem(_KEY + tenant, slot)
        except aioredis.RedisError:
            pass  # its lease runs out

    async def renew(self) -> None:
        """Extend the leases of the streams this replica holds open."""
        held = list(self._held.items())
        if held:
            await self._renew(
                keys=[_KEY + tenant for _, tenant in held], args=[self.lease_s, *(s for s, _ in held)]
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Renew every RENEW_S until stopped; a failed renewal is tried again at the next tick."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), RENEW_S)
            except TimeoutError:
                pass
            try:
                await self.renew()
            except aioredis.RedisError as exc:
                log.warning("stream slot renewal failed", error=repr(exc))

    async def close(self) -> None:
        for slot, tenant in list(self._held.items()):
            await self._remove(tenant, slot)
        self._held.clear()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._r.aclose()
