"""The reply reader: its own partitions of sy.responses and sy.stream, no group (replies.py says why).

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
from prometheus_client import Counter

from shared.runtime.bus import JOB_HEADER, decode_delta, decode_record, header, sent_ns
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Rejected
from shared.runtime.follow import Edge, Follower
from shared.runtime.stage import CACHE_SHADOW_JOB
from shared.runtime.telemetry import get_logger

from .replies import ReplyRouter
from .reply_lease import ReplyLease
from .requests.serving import async_result
from .requests.store import ResultStore

# Rollout samples reach their job through the reward service (sy.rewards) and batch lines through
# the batch collector, the cache's shadow checks to its write-back: no connection or async request
# here waits on them.
JOBS_ANSWERED_ELSEWHERE = ("rollout", "batch", CACHE_SHADOW_JOB)
UNRECORDED_MAX = 10_000
REPLY_BYTES = Counter(
    "sy_gateway_reply_bytes_read_total",
    "Bytes of sy.responses and sy.stream records this gateway replica read (values, keys, headers)",
)
REPLY_RECORDS = Counter("sy_gateway_reply_records_read_total", "Records of sy.responses and sy.stream read")

log = get_logger(__name__)


def _size(rec: ConsumerRecord) -> int:
    return (
        len(rec.value or b"")
        + len(rec.key or b"")
        + sum(len(k) + len(v or b"") for k, v in rec.headers or ())
    )


class ReplyHandler:
    """Records of sy.responses and sy.stream to the waiting connection or the async result."""

    def __init__(self, settings: Settings, replies: ReplyRouter, store: ResultStore) -> None:
        self.settings, self.replies, self.store = settings, replies, store
        self.responses_topic, self.stream_topic = settings.topic("responses"), settings.topic("stream")
        self.last_save = self.last_expire = time.monotonic()
        # Answers read while the store was down: recorded with the next batch; the offsets are
        # not saved past them meanwhile, so a restart reads them again.
        self.unrecorded: list[Envelope] = []

    async def on_records(self, records: Iterable[ConsumerRecord]) -> None:
        """Deltas and answers to this replica's connections; any other answer may be an async
        request's (of any replica: the store is shared), looked up in one round trip per batch."""
        others: list[Envelope] = []
        records = list(records)
        REPLY_RECORDS.inc(len(records))
        REPLY_BYTES.inc(sum(_size(rec) for rec in records))
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
            if not self.replies.on_response(env, sent_ns(rec) or 0):
                others.append(env)
        others = self.unrecorded + others
        if not others:
            return
        done = 0
        try:
            pending = await self.store.pending([(e.request_id, e.tenant) for e in others])
            for env in others:
                if (env.request_id, env.tenant) in pending:
                    status, result = async_result(env)
                    await self.store.finish(env.request_id, env.tenant, status, result)
                done += 1
            self.unrecorded = []
        except Exception as exc:  # noqa: BLE001 - the store is down: keep reading, record later
            self.unrecorded = others[done:]
            if len(self.unrecorded) > UNRECORDED_MAX:
                raise  # restart: the reader resumes from the offsets saved before them
            log.warning(
                "result store unavailable; answers kept to record later",
                error=repr(exc),
                waiting=len(self.unrecorded),
            )

    async def due_save(self) -> bool:
        """Every second the offsets are saved; every minute old async results expire."""
        if time.monotonic() - self.last_save <= 1.0 or self.unrecorded:
            return False
        self.last_save = time.monotonic()
        if self.last_save - self.last_expire > 60:
            self.last_expire = self.last_save
            try:
                await self.store.expire(self.settings.gateway_results_ttl_s)
            except Exception as exc:  # noqa: BLE001 - next minute
                log.warning("result store unavailable; expiry skipped", error=repr(exc))
        return True


class ReplyReader:
    """The reply side's `Follower`: responses resume from the offsets saved with the async
    results (saved past the end: the broker was reset, so from the beginning), the stream starts
    at its end. An error stops the service, as the reader always did (restart_after_s=None)."""

    def __init__(self, settings: Settings, handler: ReplyHandler, lease: ReplyLease | None = None) -> None:
        self.settings, self.handler, self.store, self.lease = settings, handler, handler.store, lease
        self.follower = Follower(
            settings,
            [handler.responses_topic, handler.stream_topic],
            name="gateway",
            on_batch=self.on_batch,
            start=self.start,
            fetch_wait_ms=settings.kafka_fetch_max_wait_ms,
            restart_after_s=None,
            partitions=lease.choose if lease is not None else None,
        )
        self.ready = self.follower.ready

    async def start(self, ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | Edge]:
        """Where each responses partition resumes; the stream's (left out) start at the end."""
        try:
            saved = await self.store.offsets(self.settings.instance_id)
        except Exception as exc:  # noqa: BLE001 - serve sync traffic; unanswered async work is resent
            log.warning("result store unavailable; replies read from their end", error=repr(exc))
            saved = {}
        starts: dict[TopicPartition, int | Edge] = {}
        for tp, end in ends.items():
            at = saved.get((tp.topic, tp.partition))
            if tp.topic == self.handler.responses_topic and at is not None:
                # Saved past the end: the broker was reset (the embedded one starts empty), so
                # everything on it is newer than our offsets.
                starts[tp] = at if at <= end else "beginning"  # resume: async results written meanwhile
        return starts

    async def on_batch(self, records: list[ConsumerRecord]) -> None:
        await self.handler.on_records(records)
        if await self.handler.due_save():
            positions = await self.follower.positions(self.handler.responses_topic)
            try:
                await self.store.save_offsets(
                    self.settings.instance_id, {(tp.topic, tp.partition): at for tp, at in positions.items()}
                )
            except Exception as exc:  # noqa: BLE001 - saved next second; a restart re-reads a little more
                log.warning("result store unavailable; offsets not saved", error=repr(exc))

    async def run(self, stop: asyncio.Event) -> None:
        if self.lease is None:
            await self.follower.run(stop)
            return
        renewals = asyncio.create_task(self.lease.run(stop, on_change=self.follower.reassign))
        try:
            await self.follower.run(stop)
        finally:
            renewals.cancel()
