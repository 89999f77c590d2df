"""The accepted log in Redis, shared by every gateway replica (store.py says what it keeps).

Each change is one Lua script, so two replicas never both accept a key, both pass a quota or
both resend a stale request.
"""

from __future__ import annotations

import json
import time
from typing import Any

from redis import asyncio as aioredis

from .store import QueueFull, Stale, view

_PREFIX = "sy:gw:"
_QUEUED = _PREFIX + "queued"  # zset "<tenant>:<id>" -> time of the last send (or acceptance)

# KEYS: request, idem ("" = none), queued, tenant's queued
# ARGV: id, tenant, endpoint, idem key, payload, now, ttl s, max queued, member
_ACCEPT = """
if KEYS[2] ~= '' then
  local prior = redis.call('GET', KEYS[2])
  if prior then return {prior, 0} end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {ARGV[1], 0} end
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[8]) then return {'', -1} end
redis.call('HSET', KEYS[1], 'tenant', ARGV[2], 'endpoint', ARGV[3], 'status', 'queued',
           'created', ARGV[6], 'payload', ARGV[5], 'sends', 0, 'idem', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[7])
if KEYS[2] ~= '' then redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[7]) end
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[9])
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[1])
return {ARGV[1], 1}
"""

# KEYS: request, queued ; ARGV: now, member
_SUBMITTED = """
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end
redis.call('HINCRBY', KEYS[1], 'sends', 1)
redis.call('ZADD', KEYS[2], 'XX', ARGV[1], ARGV[2])
return 1
"""

# KEYS: request, idem ("" = none), queued, tenant's queued ; ARGV: member, id
_FORGET = """
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end
redis.call('DEL', KEYS[1])
if KEYS[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[2])
return 1
"""

# KEYS: queued ; ARGV: cutoff, now, limit, prefix. Returns flat [member, payload|false, sends]...
_CLAIM = """
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, m in ipairs(members) do
  local key = ARGV[4] .. 'req:' .. m
  local row = redis.call('HMGET', key, 'status', 'payload', 'sends')
  if row[1] == 'queued' then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[2], m)
    redis.call('HINCRBY', key, 'sends', 1)
    table.insert(out, m); table.insert(out, row[2] or ''); table.insert(out, row[3] or '0')
  else
    redis.call('ZREM', KEYS[1], m)
  end
end
return out
"""

# KEYS: request, queued, tenant's queued ; ARGV: tenant, status, result, now, member, id
_FINISH = """
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'finished', ARGV[4], 'result', ARGV[3])
redis.call('HDEL', KEYS[1], 'payload')
redis.call('ZREM', KEYS[2], ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[6])
return 1
"""


class RedisResultStore:
    """The accepted log in Redis, shared by every gateway replica (module docstring)."""

    def __init__(self, url: str, ttl_s: float = 7 * 24 * 3600) -> None:
        # A Redis that hangs must not hang every request forever: bounded, then an error (5xx).
        self._r = aioredis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self._ttl = max(1, int(ttl_s))
        self._accept = self._r.register_script(_ACCEPT)
        self._submitted = self._r.register_script(_SUBMITTED)
        self._forget = self._r.register_script(_FORGET)
        self._claim = self._r.register_script(_CLAIM)
        self._finish = self._r.register_script(_FINISH)

    @staticmethod
    def _member(request_id: str, tenant: str) -> str:
        return f"{tenant}:{request_id}"  # tenant names have no ':' (TENANT_RE): unambiguous

    def _req(self, request_id: str, tenant: str) -> str:
        return f"{_PREFIX}req:{tenant}:{request_id}"

    @staticmethod
    def _idem(tenant: str, key: str | None) -> str:
        return f"{_PREFIX}idem:{tenant}:{key}" if key is not None else ""

    @staticmethod
    def _tenant_queued(tenant: str) -> str:
        return f"{_PREFIX}queued:{tenant}"

    async def accept(
        self,
        request_id: str,
        tenant: str,
        endpoint: str,
        idem_key: str | None,
        payload: bytes | None,
        max_queued: int,
    ) -> tuple[str, bool]:
        rid, new = await self._accept(
            keys=[
                self._req(request_id, tenant),
                self._idem(tenant, idem_key),
                _QUEUED,
                self._tenant_queued(tenant),
            ],
            args=[
                request_id,
                tenant,
                endpoint,
                idem_key or "",
                payload or b"",
                repr(time.time()),
                self._ttl,
                max_queued,
                self._member(request_id, tenant),
            ],
        )
        if int(new) < 0:
            raise QueueFull(tenant)
        return rid.decode(), bool(int(new))

    async def existing(self, tenant: str, idem_key: str) -> str | None:
        found = await self._r.get(self._idem(tenant, idem_key))
        return found.decode() if found is not None else None

    async def submitted(self, request_id: str, tenant: str) -> None:
        await self._submitted(
            keys=[self._req(request_id, tenant), _QUEUED],
            args=[repr(time.time()), self._member(request_id, tenant)],
        )

    async def forget(self, request_id: str, tenant: str) -> None:
        idem = await self._r.hget(self._req(request_id, tenant), "idem")
        await self._forget(
            keys=[
                self._req(request_id, tenant),
                self._idem(tenant, idem.decode()) if idem else "",
                _QUEUED,
                self._tenant_queued(tenant),
            ],
            args=[self._member(request_id, tenant), request_id],
        )

    async def claim_stale(self, older_than_s: float, limit: int = 100) -> list[Stale]:
        now = time.time()
        flat = await self._claim(keys=[_QUEUED], args=[repr(now - older_than_s), repr(now), limit, _PREFIX])
        out = []
        for i in range(0, len(flat), 3):
            tenant, _, rid = flat[i].decode().partition(":")
            out.append(Stale(rid, tenant, flat[i + 1] or None, int(flat[i + 2])))
        return out

    async def pending(self, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        if not keys:
            return set()
        async with self._r.pipeline(transaction=False) as pipe:
            for rid, tenant in keys:
                pipe.hget(self._req(rid, tenant), "status")
            statuses = await pipe.execute()
        return {k for k, st in zip(keys, statuses, strict=True) if st == b"queued"}

    async def finish(self, request_id: str, tenant: str, status: str, result: dict[str, Any]) -> bool:
        done = await self._finish(
            keys=[self._req(request_id, tenant), _QUEUED, self._tenant_queued(tenant)],
            args=[
                tenant,
                status,
                json.dumps(result),
                repr(time.time()),
                self._member(request_id, tenant),
                request_id,
            ],
        )
        return bool(int(done))

    async def get(self, request_id: str, tenant: str) -> dict[str, Any] | None:
        row = await self._r.hgetall(self._req(request_id, tenant))
        if not row:
            rid = await self.existing(tenant, request_id)  # the client's own request_id
            if rid is None:
                return None
            request_id, row = rid, await self._r.hgetall(self._req(rid, tenant))
            if not row:
                return None
        return view(request_id, {k.decode(): v.decode() for k, v in row.items() if k != b"payload"})

    async def queued(self, tenant: str) -> int:
        return int(await self._r.zcard(self._tenant_queued(tenant)))

    async def expire(self, older_than_s: float) -> int:
        """Requests' keys expire by themselves (TTL); this drops index entries whose request is
        gone or which have had no send for this long."""
        cutoff = time.time() - older_than_s
        old = await self._r.zrangebyscore(_QUEUED, "-inf", repr(cutoff))
        for m in old:
            tenant, _, rid = m.decode().partition(":")
            await self._r.zrem(_QUEUED, m)
            await self._r.zrem(self._tenant_queued(tenant), rid)
        return len(old)

    async def save_offsets(self, instance: str, offsets: dict[tuple[str, int], int]) -> None:
        """Saved as the gateways' latest per partition (and under the replica's id): a new
        replica (a new pod name), or one that adopts a dead replica's partition, resumes where the
        last reader was, so answers that arrived while none read are kept."""
        if not offsets:
            return
        mapping = {f"{t}:{p}": o for (t, p), o in offsets.items()}
        async with self._r.pipeline(transaction=False) as pipe:
            for key in (f"{_PREFIX}offsets:{instance}", f"{_PREFIX}offsets"):
                pipe.hset(key, mapping=mapping)
                pipe.expire(key, self._ttl)
            await pipe.execute()

    async def offsets(self, instance: str) -> dict[tuple[str, int], int]:
        raw = await self._r.hgetall(f"{_PREFIX}offsets:{instance}") or await self._r.hgetall(
            f"{_PREFIX}offsets"
        )
        out: dict[tuple[str, int], int] = {}
        for k, v in raw.items():
            topic, _, part = k.decode().rpartition(":")
            out[(topic, int(part))] = int(v)
        return out

    async def ping(self) -> bool:
        try:
            return bool(await self._r.ping())
        except Exception:  # noqa: BLE001 - readiness: any failure is "not ready"
            return False

    async def close(self) -> None:
        await self._r.aclose()
