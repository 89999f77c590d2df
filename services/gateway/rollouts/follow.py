"""The sy.rewards reader: every record of the topic into this instance's `RolloutStore`.

It reads all partitions, no group, from the beginning at every start (and again after an
error): saved offsets would skip records after a broker reset (the embedded broker starts
empty and refills past them); the store ignores repeats, so rereading is always correct.
"""

from __future__ import annotations

import asyncio

from aiokafka.structs import ConsumerRecord
from redis.exceptions import RedisError

from shared.runtime.bus import rollout_envelopes
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.follow import Follower
from shared.runtime.telemetry import get_logger

from .claims import RolloutClaims
from .store import RolloutStore

log = get_logger(__name__)


class RewardsReader:
    """sy.rewards records into the store; GETs waiting on those rollouts are woken; a rollout
    that completed or failed leaves its tenant's quota shared by the replicas (`claims`)."""

    def __init__(self, settings: Settings, store: RolloutStore, claims: RolloutClaims | None = None) -> None:
        self.store, self.claims = store, claims
        self.follower = Follower(
            settings,
            [settings.topic("rewards")],
            name="gateway-rewards",
            on_batch=self.on_batch,
            fetch_wait_ms=max(settings.kafka_fetch_max_wait_ms, 20),
        )

    async def on_batch(self, records: list[ConsumerRecord]) -> None:
        await self.take(rollout_envelopes(records))

    async def take(self, envs: list[Envelope]) -> None:
        """Store sy.rewards envelopes, wake their waiters, release finished rollouts' quota."""
        if envs:
            await asyncio.to_thread(self.store.add_many, envs)
            self.store.notify({(env.tenant, env.rollout.rollout_id) for env in envs})
            if self.claims is not None:
                await self._finished(envs)

    async def _finished(self, envs: list[Envelope]) -> None:
        # Only a group record or a job's own error can finish a rollout.
        ends = {
            (e.tenant, e.rollout.rollout_id)
            for e in envs
            if e.rollout.HasField("group") or (e.error.code and e.request_id == e.rollout.rollout_id)
        }
        if not ends or self.claims is None:
            return
        done = await asyncio.to_thread(self.store.finished, ends)
        try:
            await self.claims.finished(done)
        except RedisError as exc:  # it stops counting when the quota window passes
            log.warning("rollouts not removed from the shared quota", error=repr(exc), n=len(done))

    async def run(self, stop: asyncio.Event) -> None:
        await self.follower.run(stop)
