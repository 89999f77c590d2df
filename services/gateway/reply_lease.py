"""Which partitions of sy.responses and sy.stream a gateway replica reads (leases in Redis).

Each replica holds one *home* partition: it names it in `reply_to` on every request it sends
(`<sy.responses>:<p>`), every stage answers there (shared.runtime.stage.out_record) and the
worker streams deltas to the same partition of sy.stream. So a replica reads its own replies,
not everyone's: the bytes it reads per request stay flat as replicas are added.

A partition with no live holder (no replica started yet for it, or its replica died: its lease
ran out) is *adopted* by a live replica, which reads it from the offsets its last reader saved:
async answers that land there are still recorded, and nothing waits on a dead replica. A new
replica takes a free partition as home, else takes over an adopted one (the adopter lets go at
its next renewal). With more replicas than partitions, the extra ones have no home and read
everything, as every replica did before.

Leases are Redis keys `sy:gw:reply:<p>` = `home:<instance>` / `adopt:<instance>` with a TTL,
renewed every `ttl/3` (one Lua script per renewal).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from redis import asyncio as aioredis

from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

_KEY = "sy:gw:reply:"

# ARGV: instance, partitions, ttl ms. A free partition, else an adopted one; -1: every one is a home.
_JOIN = """
local me = 'home:' .. ARGV[1]
local n = tonumber(ARGV[2])
for i = 0, n - 1 do
  local v = redis.call('GET', KEYS[1] .. i)
  if v == me then redis.call('PEXPIRE', KEYS[1] .. i, ARGV[3]); return i end
end
for i = 0, n - 1 do
  if redis.call('SET', KEYS[1] .. i, me, 'NX', 'PX', ARGV[3]) then return i end
end
for i = 0, n - 1 do
  local v = redis.call('GET', KEYS[1] .. i)
  if v and string.sub(v, 1, 6) == 'adopt:' then
    redis.call('SET', KEYS[1] .. i, me, 'PX', ARGV[3]); return i
  end
end
return -1
"""

# ARGV: instance, partitions, ttl ms, home (-1: none). Renews what this replica holds, takes its
# home back if it lapsed, adopts partitions nobody holds; returns the partitions it reads.
_RENEW = """
local home, adopt = 'home:' .. ARGV[1], 'adopt:' .. ARGV[1]
local n, mine = tonumber(ARGV[2]), tonumber(ARGV[4])
local out = {}
for i = 0, n - 1 do
  local key = KEYS[1] .. i
  local v = redis.call('GET', key)
  if i == mine then
    if v == home or not v or string.sub(v, 1, 6) == 'adopt:' then
      redis.call('SET', key, home, 'PX', ARGV[3])
    end
    table.insert(out, i)
  elseif v == adopt then
    redis.call('PEXPIRE', key, ARGV[3]); table.insert(out, i)
  elseif not v then
    redis.call('SET', key, adopt, 'PX', ARGV[3]); table.insert(out, i)
  end
end
return out
"""

# ARGV: instance, partitions. A clean stop lets go at once, so another replica adopts now.
_LEAVE = """
for i = 0, tonumber(ARGV[2]) - 1 do
  local v = redis.call('GET', KEYS[1] .. i)
  if v == 'home:' .. ARGV[1] or v == 'adopt:' .. ARGV[1] then redis.call('DEL', KEYS[1] .. i) end
end
return 1
"""


class ReplyLease:
    """This replica's home partition and the partitions it reads (module docstring)."""

    def __init__(self, url: str, instance: str, ttl_s: float = 15.0) -> None:
        self._r = aioredis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self.instance, self.ttl_ms = instance, int(ttl_s * 1000)
        self.partitions = 0
        self.home: int | None = None
        self.reading: list[int] | None = None  # None: all (no home)
        self._joined = False
        self._join = self._r.register_script(_JOIN)
        self._renew = self._r.register_script(_RENEW)
        self._leave = self._r.register_script(_LEAVE)

    async def join(self, partitions: int) -> int | None:
        """Take a home partition of `partitions`; None when every one is another replica's home."""
        self.partitions = partitions
        got = int(await self._join(keys=[_KEY], args=[self.instance, partitions, self.ttl_ms]))
        self.home = got if got >= 0 else None
        log.info("reply partition", home=self.home, partitions=partitions)
        return self.home

    async def renew(self) -> list[int] | None:
        """Renew and adopt; the partitions to read now (None: all of them, no home)."""
        if self.home is None:
            self.reading = None
            return None
        got = await self._renew(keys=[_KEY], args=[self.instance, self.partitions, self.ttl_ms, self.home])
        self.reading = sorted(int(p) for p in got)
        return self.reading

    async def choose(self, topic: str, partitions: list[int]) -> list[int]:
        """The Follower's partition filter: join on first use, then what `renew` says. Redis
        down at start: read everything (no home, no reply_to) and join when it answers."""
        if not self.partitions:
            self.partitions = len(partitions)
            await self._try_join()
        if self.reading is None:
            return partitions
        return [p for p in self.reading if p in partitions]

    async def _try_join(self) -> bool:
        try:
            await self.join(self.partitions)
            await self.renew()
            self._joined = True
        except Exception as exc:  # noqa: BLE001 - the reader must start anyway
            log.warning("reply lease unavailable; reading every partition", error=repr(exc))
            self.home, self.reading, self._joined = None, None, False
        return self._joined

    async def run(self, stop: asyncio.Event, on_change: Callable[[], None] | None = None) -> None:
        """Renew every ttl/3 until `stop`; `on_change()` when the set to read changed."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.ttl_ms / 3000)
            except TimeoutError:
                pass
            if stop.is_set() or not self.partitions:
                continue
            before = self.reading
            if not self._joined:
                if await self._try_join() and on_change is not None:
                    on_change()
                continue
            try:
                after = await self.renew()
            except Exception as exc:  # noqa: BLE001 - Redis down: keep reading what we read
                log.warning("reply lease not renewed", error=repr(exc))
                continue
            if after != before and on_change is not None:
                log.info("reply partitions changed", before=before, after=after)
                on_change()

    def reply_to(self, responses_topic: str) -> str:
        """What requests sent by this replica carry in `reply_to` ("" without a home)."""
        return f"{responses_topic}:{self.home}" if self.home is not None else ""

    async def close(self) -> None:
        if self.partitions:
            try:
                await self._leave(keys=[_KEY], args=[self.instance, self.partitions])
            except Exception as exc:  # noqa: BLE001 - the leases run out by themselves
                log.warning("reply lease not released", error=repr(exc))
        await self._r.aclose()
