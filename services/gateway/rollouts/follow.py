"""The sy.rewards reader: every record of the topic into this instance's `RolloutStore`.

It reads all partitions, no group, from the beginning at every start (and again after an
error): saved offsets would skip records after a broker reset (the embedded broker starts
empty and refills past them); the store ignores repeats, so rereading is always correct.
"""

from __future__ import annotations

import asyncio

from aiokafka.structs import ConsumerRecord

from shared.runtime.bus import rollout_envelopes
from shared.runtime.config import Settings
from shared.runtime.follow import Follower

from .store import RolloutStore


class RewardsReader:
    """sy.rewards records into the store; GETs waiting on those rollouts are woken."""

    def __init__(self, settings: Settings, store: RolloutStore) -> None:
        self.store = store
        self.follower = Follower(
            settings,
            [settings.topic("rewards")],
            name="gateway-rewards",
            on_batch=self.on_batch,
            fetch_wait_ms=max(settings.kafka_fetch_max_wait_ms, 20),
        )

    async def on_batch(self, records: list[ConsumerRecord]) -> None:
        envs = rollout_envelopes(records)
        if envs:
            await asyncio.to_thread(self.store.add_many, envs)
            self.store.notify({(env.tenant, env.rollout.rollout_id) for env in envs})

    async def run(self, stop: asyncio.Event) -> None:
        await self.follower.run(stop)
