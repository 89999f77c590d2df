"""The reply reader: sy.responses and sy.stream, all partitions, no group (replies.py says why).

`ReplyHandler` is what a record means (no Kafka in it); `ReplyReader` reads the topics with
shared.runtime.follow.Follower: responses resume from the offsets saved with the async results,
the stream from its end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from shared.runtime.bus import JOB_HEADER, decode_delta, decode_record, header, sent_ns
from shared.runtime.config import Settings
from shared.runtime.envelope import Rejected
from shared.runtime.follow import Edge, Follower
from shared.runtime.stage import CACHE_SHADOW_JOB

from .replies import ReplyRouter, ResultStore
from .requests.serving import async_result

# Rollout samples reach their job through the reward service (sy.rewards) and batch lines through
# the batch collector, the cache's shadow checks to its write-back: no connection or async request
# here waits on them.
JOBS_ANSWERED_ELSEWHERE = ("rollout", "batch", CACHE_SHADOW_JOB)


class ReplyHandler:
    """Records of sy.responses and sy.stream to the waiting connection or the async result."""

    def __init__(self, settings: Settings, replies: ReplyRouter, store: ResultStore) -> None:
        self.settings, self.replies, self.store = settings, replies, store
        self.responses_topic, self.stream_topic = settings.topic("responses"), settings.topic("stream")
        self.last_save = self.last_expire = time.monotonic()

    def on_records(self, records: Iterable[ConsumerRecord]) -> None:
        for rec in records:
            if rec.topic == self.stream_topic:
                try:
                    self.replies.on_delta(decode_delta(rec))
                except Exception:  # noqa: BLE001 - not ours to fail on
                    continue
                continue
            if header(rec.headers, JOB_HEADER) in JOBS_ANSWERED_ELSEWHERE:
                continue
            try:
                env = decode_record(rec)
            except Rejected:
                continue
            if not self.replies.on_response(env, sent_ns(rec) or 0) and self.store.is_pending(
                env.request_id, env.tenant
            ):
                status, result = async_result(env)
                self.store.finish(env.request_id, env.tenant, status, result)

    def due_save(self) -> bool:
        """Every second the offsets are saved; every minute old async results expire."""
        if time.monotonic() - self.last_save <= 1.0:
            return False
        self.last_save = time.monotonic()
        if self.last_save - self.last_expire > 60:
            self.last_expire = self.last_save
            self.store.expire(self.settings.gateway_results_ttl_s)
        return True


class ReplyReader:
    """The reply side's `Follower`: responses resume from the offsets saved with the async
    results (saved past the end: the broker was reset, so from the beginning), the stream starts
    at its end. An error stops the service, as the reader always did (restart_after_s=None)."""

    def __init__(self, settings: Settings, handler: ReplyHandler) -> None:
        self.settings, self.handler, self.store = settings, handler, handler.store
        self.follower = Follower(
            settings,
            [handler.responses_topic, handler.stream_topic],
            name="gateway",
            on_batch=self.on_batch,
            start=self.start,
            fetch_wait_ms=settings.kafka_fetch_max_wait_ms,
            restart_after_s=None,
        )
        self.ready = self.follower.ready

    def start(self, ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | Edge]:
        """Where each responses partition resumes; the stream's (left out) start at the end."""
        saved = self.store.offsets()
        starts: dict[TopicPartition, int | Edge] = {}
        for tp, end in ends.items():
            at = saved.get((tp.topic, tp.partition))
            if tp.topic == self.handler.responses_topic and at is not None:
                # Saved past the end: the broker was reset (the embedded one starts empty), so
                # everything on it is newer than our offsets.
                starts[tp] = at if at <= end else "beginning"  # resume: async results written meanwhile
        return starts

    async def on_batch(self, records: list[ConsumerRecord]) -> None:
        self.handler.on_records(records)
        if self.handler.due_save():
            positions = await self.follower.positions(self.handler.responses_topic)
            self.store.save_offsets({(tp.topic, tp.partition): at for tp, at in positions.items()})

    async def run(self, stop: asyncio.Event) -> None:
        await self.follower.run(stop)
