"""Kafka producer and consumer with the stage rules of DESIGN.md §3, on aiokafka.

- At-least-once: an offset is committed only when the record's outputs were acknowledged
  by the broker, and only up to the lowest record of its partition still in flight.
- Bounded in-flight records per consumer (fetch only as many as there are free slots).
- Any handler failure (any exception, or an attempt longer than SY_STAGE_HANDLER_TIMEOUT_S) is
  retried with exponential backoff; `Rejected` (poison) and exhausted retries write ONE DLQ
  record (a bounded excerpt of the input, its size and sha256, the reason as headers too) and
  the offset moves on. A dead letter is final: nothing reads it back into the stage.
- `DependencyUnavailable` (object store, Milvus, Triton, registry down) is waited out with
  backoff until the dependency returns or the stage stops: never counted, never dead-lettered.
- A record whose handler kills the process is counted in a delivery log that outlives it
  (shared.runtime.deliveries); after SY_STAGE_MAX_DELIVERIES it is dead-lettered unhandled, and a record
  redelivered after a crash runs alone, so its neighbours are not blamed for it.
- Nothing a stage writes exceeds SY_MAX_RECORD_BYTES, the limit it enforces on what it reads:
  an oversized output dead-letters its input instead.
- Producing outputs is retried until it succeeds or the stage stops: a broker outage is not
  the record's fault, so it never sends a record to the DLQ. A produce the broker can never
  accept (too large, invalid record) is final and dead-letters the input, once.
- Ready means flowing: `flowing()` is false while records wait and none finished for
  SY_STALL_AFTER_S; `Producer.deliverable()` is false while sends fail for that long.
- `stop()` stops fetching, drains in-flight records (bounded), commits, then closes.

Why not FastStream: its subscriber acks per message, and with concurrent workers it cannot
hold back an offset until every earlier record of the partition is done; the rules above are
the point of this module, so it is written on aiokafka directly (about the same size as the
FastStream wiring would be). The AsyncAPI document is generated from shared.runtime.topics instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    CorruptRecordException,
    InvalidMessageError,
    InvalidRequestError,
    InvalidTimestampError,
    InvalidTopicError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)
from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import DeadLetter, Header

from shared.runtime.config import Settings
from shared.runtime.deliveries import DeliveryLog
from shared.runtime.envelope import DependencyUnavailable, ErrorCode, Rejected
from shared.runtime.telemetry import (
    CONSUMER_LAG,
    DEAD_LETTERS,
    DEPENDENCY_WAITS,
    ERRORS,
    IN_FLIGHT,
    PRODUCED,
    QUEUE_WAIT_SECONDS,
    RECORDS,
    STAGE_SECONDS,
    STALLED,
    get_logger,
)

log = get_logger(__name__)

SENT_NS_HEADER = "sy-sent-ns"
CONTENT_TYPE_HEADER = "content-type"
# The job an envelope record belongs to ("rollout", "batch"; empty for a single request), so a
# reader that wants one kind of job skips the rest of a shared topic without decoding them.
JOB_HEADER = "sy-job"

Headers = list[tuple[str, bytes]]


def header(headers: Sequence[tuple[str, bytes | None]] | None, key: str) -> str | None:
    """Last value of a header as text (Kafka allows repeats; the last one wins)."""
    found = None
    for k, v in headers or []:
        if k == key and v is not None:
            found = v.decode("latin-1")
    return found


def sent_ns(rec: ConsumerRecord) -> int | None:
    """When the record was produced: our header (ns), else the Kafka CreateTime (ms) of outside producers."""
    v = header(rec.headers, SENT_NS_HEADER)
    if v and v.isdigit():
        return int(v)
    if rec.timestamp_type == 0 and rec.timestamp and rec.timestamp > 0:
        return int(rec.timestamp) * 1_000_000
    return None


def client_kwargs(settings: Settings) -> dict[str, object]:
    """Connection options shared by producers, consumers and admin clients."""
    kw: dict[str, object] = {
        "bootstrap_servers": settings.kafka_bootstrap or "127.0.0.1:9092",
        "security_protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_sasl_mechanism:
        kw["sasl_mechanism"] = settings.kafka_sasl_mechanism
        kw["sasl_plain_username"] = settings.kafka_sasl_username
        kw["sasl_plain_password"] = (
            settings.kafka_sasl_password.get_secret_value() if settings.kafka_sasl_password else None
        )
    if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        kw["ssl_context"] = create_ssl_context()
    return kw


@dataclass(slots=True)
class OutRecord:
    """A record to produce: the bus adds the sent-time header and awaits the broker's ack."""

    topic: str
    value: bytes
    key: bytes | None = None
    headers: Headers = field(default_factory=list)
    partition: int | None = None


class Producer:
    """aiokafka producer with acks=all; `send_all` returns once every record is acknowledged."""

    def __init__(self, settings: Settings, client_id: str = "switchyard") -> None:
        self._settings = settings
        self._p = AIOKafkaProducer(
            **client_kwargs(settings),  # type: ignore[arg-type]
            client_id=client_id,
            acks="all",
            # Idempotence/transactions are off: the embedded broker refuses InitProducerId v0,
            # and consumers dedupe by request_id anyway (DESIGN §3).
            enable_idempotence=False,
            linger_ms=settings.kafka_linger_ms,
            max_request_size=settings.kafka_max_request_bytes,
            request_timeout_ms=30000,
        )

        # Since when sends have been failing with no success after (None: delivering).
        self._failing_since: float | None = None

    async def start(self) -> None:
        await self._p.start()

    async def stop(self) -> None:
        await self._p.stop()

    def deliverable(self, stall_after_s: float | None = None) -> bool:
        """False once sends have failed for SY_STALL_AFTER_S with no acknowledged send since."""
        since = self._failing_since
        limit = self._settings.stall_after_s if stall_after_s is None else stall_after_s
        return since is None or time.monotonic() - since < limit

    def _failed(self) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    async def send_soon(self, r: OutRecord) -> asyncio.Future[object]:
        """Hand a record to the client's batcher; the returned future resolves on the broker's ack."""
        headers = [(k, v) for k, v in r.headers if k != SENT_NS_HEADER]
        headers.append((SENT_NS_HEADER, str(time.time_ns()).encode()))
        try:
            fut = await self._p.send(r.topic, r.value, key=r.key, headers=headers, partition=r.partition)
        except Exception:
            self._failed()
            # A restarted broker re-creates its topics: metadata cached before that can lack a
            # partition ("Unrecognized partition") for minutes (metadata_max_age_ms). Refresh it
            # now, so the caller's retry sees the topics as they are.
            self._p.client.force_metadata_update()
            raise
        PRODUCED.labels(r.topic).inc()
        fut.add_done_callback(self._acked)
        return fut

    def _acked(self, fut: asyncio.Future[object]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self._failed()
        else:
            self._failing_since = None

    async def send_all(self, records: Sequence[OutRecord]) -> None:
        """Produce records (batched by the client) and wait for every ack."""
        futures = [await self.send_soon(r) for r in records]
        for fut in futures:
            await fut

    async def send(self, record: OutRecord) -> None:
        await self.send_all([record])


class OffsetTracker:
    """Which offset of each partition may be committed while records finish out of order."""

    def __init__(self) -> None:
        self._pending: dict[TopicPartition, set[int]] = {}
        self._next: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}

    def add(self, tp: TopicPartition, offset: int) -> None:
        self._pending.setdefault(tp, set()).add(offset)
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def done(self, tp: TopicPartition, offset: int) -> None:
        pending = self._pending.get(tp)
        if pending is not None:
            pending.discard(offset)

    def committable(self) -> dict[TopicPartition, int]:
        """Offsets to commit now: below the lowest pending one, and only where they moved."""
        out = {}
        for tp, nxt in self._next.items():
            pending = self._pending.get(tp)
            pos = min(pending) if pending else nxt
            if self._committed.get(tp, -1) < pos:
                out[tp] = pos
        return out

    def mark_committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, pos in offsets.items():
            self._committed[tp] = max(self._committed.get(tp, -1), pos)

    def forget(self, tps: Sequence[TopicPartition]) -> None:
        for tp in tps:
            self._pending.pop(tp, None)
            self._next.pop(tp, None)
            self._committed.pop(tp, None)

    def next_offset(self, tp: TopicPartition) -> int | None:
        return self._next.get(tp)


Handler = Callable[[ConsumerRecord], Awaitable[Sequence[OutRecord]]]
# Called when a record goes to the DLQ: may fill in the dead letter's request_id/tenant and
# return extra records to produce with it (e.g. an error reply for a waiting requester).
DeadHook = Callable[[ConsumerRecord, DeadLetter], Sequence[OutRecord]]


def backoff_s(attempt: int, base_ms: int, max_ms: int) -> float:
    """Exponential backoff with full jitter, attempt counting from 1."""
    return random.uniform(0, min(max_ms, base_ms * (2 ** (attempt - 1)))) / 1000.0


# A dead letter keeps at most this much of the input, whatever SY_DLQ_MAX_ORIGINAL_BYTES says,
# and its headers (a foreign producer's, of any size) are cut the same way.
DLQ_EXCERPT_MAX = 64 * 1024
_HEADER_VALUE_MAX = 1024
_HEADERS_MAX = 32
_REASON_MAX = 1024

# Produce errors a retry cannot cure: the broker will never take these records.
FINAL_PRODUCE_ERRORS: tuple[type[BaseException], ...] = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    RecordListTooLargeError,
    CorruptRecordException,
    InvalidMessageError,
    InvalidTopicError,
    InvalidRequestError,
    InvalidTimestampError,
    TopicAuthorizationFailedError,
    TypeError,
    ValueError,
)

# Dead-letter headers, named as Kafka Connect's are, so kcat or any DLQ tool reads the reason.
DLQ_CODE_HEADER = "sy-error-code"
DLQ_REASON_HEADER = "sy-error-reason"
DLQ_STAGE_HEADER = "sy-error-stage"


def bounded(text: str, limit: int = _REASON_MAX) -> str:
    """A reason or id cut to `limit` characters: exception texts may echo the input."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def record_size(r: OutRecord) -> int:
    """Bytes a record takes on the wire, near enough to hold it to SY_MAX_RECORD_BYTES."""
    return len(r.value) + len(r.key or b"") + sum(len(k) + len(v or b"") for k, v in r.headers) + 64


def dead_letter(
    rec: ConsumerRecord, stage: str, code: str, reason: str, attempts: int, max_bytes: int
) -> DeadLetter:
    """The DLQ record of `rec`: a bounded excerpt, never the whole input (DESIGN §3)."""
    value = rec.value or b""
    keep = min(max_bytes, DLQ_EXCERPT_MAX)
    key = rec.key or b""
    return DeadLetter(
        original_value=value[:keep],
        original_key=key[:_HEADER_VALUE_MAX],
        original_headers=[
            Header(key=bounded(k, 256), value=(v or b"")[:_HEADER_VALUE_MAX])
            for k, v in (rec.headers or [])[:_HEADERS_MAX]
        ],
        topic=rec.topic,
        partition=rec.partition,
        offset=rec.offset,
        stage=stage,
        reason=bounded(reason),
        error_code=code,
        attempts=attempts,
        failed_unix_ns=time.time_ns(),
        original_size=len(value),
        truncated=len(value) > keep,
        original_sha256=hashlib.sha256(value).hexdigest(),
    )


def dlq_headers(dl: DeadLetter) -> Headers:
    """What a Kafka tool needs to read a dead letter without our protobuf schema."""

    def ascii_(text: str) -> bytes:
        return text.encode("ascii", "replace")

    return [
        (CONTENT_TYPE_HEADER, b"application/x-protobuf"),
        ("sy-stage", dl.stage.encode()),
        (DLQ_CODE_HEADER, ascii_(dl.error_code)),
        (DLQ_REASON_HEADER, ascii_(bounded(dl.reason, 512))),
        (DLQ_STAGE_HEADER, dl.stage.encode()),
        ("sy-source-topic", ascii_(dl.topic)),
        ("sy-source-partition", str(dl.partition).encode()),
        ("sy-source-offset", str(dl.offset).encode()),
        ("sy-original-size", str(dl.original_size).encode()),
        ("sy-original-sha256", dl.original_sha256.encode()),
    ]


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, consumer: StageConsumer) -> None:
        self._c = consumer

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self._c._on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        log.info(
            "partitions assigned",
            stage=self._c.stage,
            partitions=[f"{t.topic}:{t.partition}" for t in assigned],
        )


def off_path_wait_ms(settings: Settings) -> int:
    """Fetch wait of readers no reply waits for (state topics, cache write-back, batch results):
    on the embedded broker every held fetch costs polls, and these need not answer in 5 ms."""
    return max(settings.kafka_fetch_max_wait_ms, 50)


def _positions(consumer: AIOKafkaConsumer) -> Iterator[tuple[TopicPartition, int, int | None]]:
    """(partition, next offset to fetch, high watermark of the last fetch) for each assigned
    partition with a position: aiokafka's own per-partition state (AttributeError where an
    aiokafka lacks these internals)."""
    assignment = consumer._subscription.subscription.assignment
    for tp in consumer.assignment():
        st = assignment.state_value(tp)
        if st.has_valid_position:
            yield tp, st.position, st.highwater


def rewind_reset_logs(consumer: AIOKafkaConsumer, reader: str) -> list[TopicPartition]:
    """Read again from the start every partition whose log now ends before this reader's position.

    The embedded broker keeps topics in memory and restarts empty; a reader that assigned its
    partitions itself (no group to rejoin) keeps its old position and, as it gets no
    out-of-range error there, would wait until the new log grew past it, skipping every record
    below (seen: position 50, high watermark 5 after a restart). Whatever the new log holds is
    newer than what was read. On Apache Kafka the high watermark stays ahead of a position.
    """
    try:
        behind = [(tp, pos, hw) for tp, pos, hw in _positions(consumer) if hw is not None and hw < pos]
    except AttributeError:  # an aiokafka without these internals: nothing to check
        return []
    for tp, pos, hw in behind:
        log.warning(
            "partition log restarted behind the reader; reading it from the start",
            reader=reader,
            topic=tp.topic,
            partition=tp.partition,
            position=pos,
            high_watermark=hw,
        )
        consumer.seek(tp, 0)
    return [tp for tp, _, _ in behind]


class FetchWaitGuard:
    """Set a consumer's fetch wait from what its fetches find.

    Idle: after `idle_after_s` without a record the wait rises to `idle_wait_ms`, and the first
    record (or `wake()`) sets it back. A reader that has had no record since it started is idle
    from its first empty fetch: most readers of a fresh stack wait for traffic that may never
    come to them (preprocess behind a gateway that prepares text, reward without rollouts): in a
    stack's first half minute preprocess, reward and batch took 13 % of the services' core at
    concurrency 8, 8 % once idle (docs/stage-rules.md). On the embedded broker every held fetch costs polls of its
    storage: a stack at rest took ~2/3 of a core with every reader at 5 ms, mostly readers whose
    topic carries nothing in that deployment (an idle pool, rollouts, raw producers). The price
    is the first record after an idle spell, which waits for the long fetch in flight (on
    average a sixth of it on Tansu, which polls after half the remaining wait); Apache Kafka
    answers a fetch as soon as a record arrives, so there it costs nothing.

    Lagging: the embedded broker's fetch time grows with the batches a partition holds; past a
    point a short wait returns nothing at all and the consumer would stall. After ~20 empty polls
    with records waiting the wait doubles (up to 500 ms): latency traded for progress, logged.
    Apache Kafka never gets here.
    """

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        stage: str,
        polls: int = 20,
        ceiling_ms: int = 500,
        idle_after_s: float = 0.0,
        idle_wait_ms: int = 0,
    ) -> None:
        self.consumer, self.stage, self.polls, self.ceiling_ms = consumer, stage, polls, ceiling_ms
        self.idle_after_s, self.idle_wait_ms = idle_after_s, idle_wait_ms
        self._empty = 0
        self._last_records = -math.inf  # no record yet: idle at the first empty fetch
        self._active_ms: int | None = None  # the wait before an idle spell raised it

    @classmethod
    def from_settings(cls, consumer: AIOKafkaConsumer, stage: str, settings: Settings) -> FetchWaitGuard:
        """A guard with the idle back-off of SY_KAFKA_IDLE_AFTER_S / SY_KAFKA_IDLE_FETCH_WAIT_MS."""
        return cls(
            consumer,
            stage,
            idle_after_s=settings.kafka_idle_after_s,
            idle_wait_ms=settings.kafka_idle_fetch_wait_ms,
        )

    @property
    def idle(self) -> bool:
        return self._active_ms is not None

    def _lagging(self) -> bool:
        return any(hw is not None and hw > pos for _, pos, hw in _positions(self.consumer))

    def wake(self) -> None:
        """Records are expected soon (this process just sent what will answer): short waits again."""
        self._last_records = time.monotonic()
        if self._active_ms is not None:
            try:
                self.consumer._fetcher._fetch_max_wait_ms = self._active_ms
            except AttributeError:
                pass
            self._active_ms = None

    def observe(self, got_records: bool) -> None:
        if got_records:
            self.wake()
        try:
            if got_records or not self._lagging():
                self._empty = 0
                if not got_records:
                    self._maybe_idle()
                return
            self.wake()  # records wait: not idle
            fetcher = self.consumer._fetcher
            current = int(fetcher._fetch_max_wait_ms)
        except (AttributeError, TypeError):  # an aiokafka without these internals: no guard
            return
        self._empty += 1
        if self._empty >= self.polls and current < self.ceiling_ms:
            fetcher._fetch_max_wait_ms = min(self.ceiling_ms, current * 2)
            self._empty = 0
            log.warning(
                "fetch wait raised: fetches return nothing while records wait",
                stage=self.stage,
                fetch_max_wait_ms=fetcher._fetch_max_wait_ms,
            )

    def _maybe_idle(self) -> None:
        if self._active_ms is not None or self.idle_wait_ms <= 0 or self.idle_after_s <= 0:
            return
        if time.monotonic() - self._last_records < self.idle_after_s:
            return
        fetcher = self.consumer._fetcher
        current = int(fetcher._fetch_max_wait_ms)
        if current >= self.idle_wait_ms:
            return
        self._active_ms = current
        fetcher._fetch_max_wait_ms = self.idle_wait_ms


class StageConsumer:
    """Consume topics in a group and run `handler` on each record under the stage rules."""

    def __init__(
        self,
        *,
        stage: str,
        topics: Sequence[str],
        group_id: str,
        handler: Handler,
        producer: Producer,
        settings: Settings,
        dlq_topic: str,
        on_dead: DeadHook | None = None,
        max_in_flight: int | None = None,
        fetch_max_wait_ms: int | None = None,
    ) -> None:
        self.stage = stage
        self.topics = list(topics)
        self.group_id = group_id
        self._handler = handler
        self._producer = producer
        self._s = settings
        self._dlq_topic = dlq_topic
        self._on_dead = on_dead
        self._max_in_flight = max_in_flight or settings.stage_max_in_flight
        self._tracker = OffsetTracker()
        self._tasks: dict[asyncio.Task[None], TopicPartition] = {}
        self._stopping = asyncio.Event()
        self._last_commit = 0.0
        self._commit_lock = asyncio.Lock()
        self._refusal = ""  # why the broker last refused this stage's output for good
        self.consumer = AIOKafkaConsumer(
            **client_kwargs(settings),  # type: ignore[arg-type]
            group_id=group_id,
            client_id=f"{stage}-{settings.instance_id}",
            enable_auto_commit=False,
            # "latest" replays part of the last batch on the embedded broker; committed
            # offsets plus "earliest" is right on both brokers.
            auto_offset_reset="earliest",
            fetch_max_wait_ms=fetch_max_wait_ms or settings.kafka_fetch_max_wait_ms,
            session_timeout_ms=settings.kafka_session_timeout_ms,
            heartbeat_interval_ms=settings.kafka_heartbeat_interval_ms,
            rebalance_timeout_ms=max(settings.kafka_session_timeout_ms, int(settings.drain_timeout_s * 1000)),
            max_partition_fetch_bytes=settings.kafka_max_request_bytes,
            fetch_max_bytes=settings.kafka_max_request_bytes * 4,
            max_poll_interval_ms=300000,
        )
        self._fetch_guard = FetchWaitGuard.from_settings(self.consumer, stage, settings)
        self.started = False
        self._deliveries = DeliveryLog(settings.state_path / f"deliveries-{group_id}.sqlite", group_id)
        self._last_progress = time.monotonic()  # a record finished, or nothing was waiting

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.consumer.subscribe(self.topics, listener=_Rebalance(self))
        await self.consumer.start()
        self.started = True

    def assigned(self) -> bool:
        return bool(self.consumer.assignment())

    def waiting(self) -> bool:
        """Records are in flight here, or wait in an assigned partition beyond the position."""
        if self._tasks:
            return True
        try:
            return any(hw is not None and hw > pos for _, pos, hw in _positions(self.consumer))
        except AttributeError:
            return False

    def flowing(self) -> bool:
        """Readiness: false while records wait and none finished for SY_STALL_AFTER_S."""
        now = time.monotonic()
        if not self.waiting():
            self._last_progress = now
        stalled = now - self._last_progress >= self._s.stall_after_s
        STALLED.labels(self.stage).set(1 if stalled else 0)
        return not stalled

    async def run(self) -> None:
        """Fetch and dispatch until stop(); then drain, commit and close."""
        if not self.started:
            await self.start()
        try:
            while not self._stopping.is_set():
                free = self._max_in_flight - len(self._tasks)
                if free <= 0:
                    await asyncio.wait(list(self._tasks), timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
                    await self._maybe_commit()
                    continue
                batch = await self.consumer.getmany(timeout_ms=50, max_records=free)
                if batch:
                    await self._dispatch_batch(batch)
                reset = rewind_reset_logs(self.consumer, self.stage)
                if reset:
                    # A group whose broker lost its data (the embedded one restarts empty) may
                    # keep its old position past the new log's end, with no out-of-range error
                    # to move it: read the new log from its start, commit from scratch.
                    self._tracker.forget(reset)
                self._update_lag()
                self._fetch_guard.observe(bool(batch))
                await self._maybe_commit()
        finally:
            await self._drain()
            await self.consumer.stop()
            self._deliveries.close()
            self.started = False

    async def stop(self) -> None:
        self._stopping.set()

    # ------------------------------------------------------------------ work
    async def _dispatch_batch(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """Count each record's delivery where a crash cannot lose it, then start its work.

        A record delivered before (its process died with it in flight) runs alone: the others in
        flight then could not have been what killed the process, and are not counted for it.
        """
        recs = [rec for records in batch.values() for rec in records]
        try:
            prior = self._deliveries.begin(recs)
        except Exception as exc:  # noqa: BLE001 - a broken state dir must not stop the stage
            log.warning("delivery log unavailable; crash counts not kept", stage=self.stage, error=repr(exc))
            prior = {}
        for tp, records in batch.items():
            for rec in records:
                before = prior.get((rec.topic, rec.partition, rec.offset), 0)
                if before == 0:
                    self._dispatch(tp, rec, 1)
                    continue
                if self._tasks:
                    await asyncio.wait(list(self._tasks))
                # What finished before it is committed first: if it kills the process again,
                # only it is delivered (and counted) again.
                await self.commit()
                try:
                    self._deliveries.again(rec, before + 1)
                except Exception as exc:  # noqa: BLE001 - see above
                    log.warning("delivery log unavailable", stage=self.stage, error=repr(exc))
                task = self._dispatch(tp, rec, before + 1)
                await asyncio.wait([task])

    def _dispatch(self, tp: TopicPartition, rec: ConsumerRecord, delivery: int) -> asyncio.Task[None]:
        if not self._tasks:
            self._last_progress = time.monotonic()  # work starts from rest: the stall clock too
        self._tracker.add(tp, rec.offset)
        task = asyncio.create_task(self._process(tp, rec, delivery))
        self._tasks[task] = tp
        task.add_done_callback(self._tasks.pop)
        IN_FLIGHT.labels(self.stage).set(len(self._tasks))
        return task

    async def _attempt(self, rec: ConsumerRecord) -> Sequence[OutRecord]:
        """One handler attempt: the input's size first, then the handler within its time limit,
        then the size of everything it would write."""
        limit = self._s.max_record_bytes
        if rec.value is not None and len(rec.value) > limit:
            raise Rejected(
                ErrorCode.RECORD_TOO_LARGE,
                f"record is {len(rec.value)} bytes, limit SY_MAX_RECORD_BYTES={limit} (send media by reference)",
                http_status=413,
            )
        try:
            outputs = await asyncio.wait_for(self._handler(rec), timeout=self._s.stage_handler_timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"handler took over SY_STAGE_HANDLER_TIMEOUT_S={self._s.stage_handler_timeout_s:g}s"
            ) from None
        for r in outputs:
            if record_size(r) > limit:
                raise Rejected(
                    ErrorCode.OUTPUT_TOO_LARGE,
                    f"the stage's output to {r.topic} would be {record_size(r)} bytes, over "
                    f"SY_MAX_RECORD_BYTES={limit}",
                    http_status=413,
                )
        return outputs

    async def _process(self, tp: TopicPartition, rec: ConsumerRecord, delivery: int = 1) -> None:
        t0 = time.perf_counter()
        sent = sent_ns(rec)
        if sent is not None:
            QUEUE_WAIT_SECONDS.labels(self.stage, rec.topic).observe(max(0, time.time_ns() - sent) / 1e9)
        outputs: Sequence[OutRecord] | None = None
        attempt = 0
        waits = 0
        outcome = "ok"
        if delivery > self._s.stage_max_deliveries:
            reason = (
                f"the process handling this record died {delivery - 1} times "
                f"(SY_STAGE_MAX_DELIVERIES={self._s.stage_max_deliveries})"
            )
            outputs, outcome = (
                self._dead_outputs(rec, ErrorCode.DELIVERIES_EXHAUSTED, reason, delivery - 1),
                "dlq",
            )
        while outputs is None:
            attempt += 1
            try:
                outputs = await self._attempt(rec)
            except asyncio.CancelledError:
                raise
            except Rejected as exc:
                outputs = self._dead_outputs(rec, exc.code, exc.reason, attempt)
                outcome = "dlq"
            except DependencyUnavailable as exc:
                # Not the record's fault: wait for the dependency, however long, unless stopping.
                attempt -= 1
                waits += 1
                DEPENDENCY_WAITS.labels(self.stage, exc.dependency).inc()
                if waits == 1 or waits % 20 == 0:
                    log.warning(
                        "dependency unavailable; waiting",
                        stage=self.stage,
                        dependency=exc.dependency,
                        error=str(exc),
                    )
                if self._stopping.is_set():
                    return  # uncommitted: the next start (or another replica) handles it
                await self._sleep_unless_stopping(
                    backoff_s(
                        min(waits, 10), self._s.stage_retry_backoff_ms, self._s.stage_retry_backoff_max_ms
                    )
                )
            except Exception as exc:  # noqa: BLE001 - any handler failure is retried, then DLQ'd
                ERRORS.labels(self.stage, type(exc).__name__).inc()
                if attempt >= self._s.stage_max_attempts:
                    cause = f" (caused by {exc.__cause__!r})" if exc.__cause__ else ""
                    reason = f"failed {attempt} times, last: {type(exc).__name__}: {exc}{cause}"
                    outputs = self._dead_outputs(rec, ErrorCode.RETRIES_EXHAUSTED, reason, attempt)
                    outcome = "dlq"
                    log.error(
                        "giving up on record",
                        stage=self.stage,
                        offset=rec.offset,
                        error=bounded(str(exc), 300),
                    )
                else:
                    log.warning(
                        "handler failed; retrying",
                        stage=self.stage,
                        attempt=attempt,
                        error=bounded(repr(exc), 300),
                        cause=bounded(repr(exc.__cause__), 300) if exc.__cause__ else None,
                    )
                    await asyncio.sleep(
                        backoff_s(attempt, self._s.stage_retry_backoff_ms, self._s.stage_retry_backoff_max_ms)
                    )
        published = await self._publish(outputs)
        if published is None and outcome == "ok":
            # The broker refused the outputs for good: the input goes to the DLQ instead, once.
            outputs, outcome = (
                self._dead_outputs(rec, ErrorCode.PRODUCE_REJECTED, self._refusal, attempt),
                "dlq",
            )
            published = await self._publish(outputs)
        if published is None:
            log.error(
                "dead letter refused by the broker; record dropped", stage=self.stage, offset=rec.offset
            )
            ERRORS.labels(self.stage, "dlq_refused").inc()
            published = True
        if published:
            self._tracker.done(tp, rec.offset)
            self._last_progress = time.monotonic()
            RECORDS.labels(self.stage, outcome).inc()
            STAGE_SECONDS.labels(self.stage).observe(time.perf_counter() - t0)

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    def _dead_outputs(self, rec: ConsumerRecord, code: str, reason: str, attempts: int) -> list[OutRecord]:
        ERRORS.labels(self.stage, code).inc()
        DEAD_LETTERS.labels(self.stage, code).inc()
        log.warning(
            "record to DLQ",
            stage=self.stage,
            code=code,
            reason=bounded(reason, 300),
            topic=rec.topic,
            offset=rec.offset,
        )
        dl = dead_letter(rec, self.stage, code, reason, attempts, self._s.dlq_max_original_bytes)
        extra: list[OutRecord] = []
        if self._on_dead is not None:
            try:
                extra = list(self._on_dead(rec, dl))
            except Exception as exc:  # noqa: BLE001 - the DLQ record matters more than the reply
                log.warning("on_dead hook failed", error=str(exc))
        # A reply onto a topic this stage reads would come back to it (and to every other reader):
        # a dead letter is final, so such replies are dropped. An oversized one is dropped too.
        extra = [
            r for r in extra if r.topic not in self.topics and record_size(r) <= self._s.max_record_bytes
        ]
        dlq = OutRecord(
            topic=self._dlq_topic, value=dl.SerializeToString(), key=rec.key, headers=dlq_headers(dl)
        )
        if rec.key is not None and len(rec.key) > _HEADER_VALUE_MAX:
            dlq.key = rec.key[:_HEADER_VALUE_MAX]
        return [dlq, *extra]

    async def _publish(self, outputs: Sequence[OutRecord]) -> bool | None:
        """Produce until acknowledged. False: the stage stopped first (the record stays
        uncommitted); None: the broker can never accept these records (`self._refusal` says why)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._producer.send_all(outputs)
                return True
            except asyncio.CancelledError:
                raise
            except FINAL_PRODUCE_ERRORS as exc:
                ERRORS.labels(self.stage, "produce_rejected").inc()
                self._refusal = bounded(
                    f"the broker refused this stage's output: {type(exc).__name__}: {exc}"
                )
                log.warning("produce refused for good", stage=self.stage, error=bounded(repr(exc), 300))
                return None
            except Exception as exc:  # noqa: BLE001 - a broker outage: retry until it returns
                ERRORS.labels(self.stage, "produce_failed").inc()
                log.warning("produce failed; retrying", stage=self.stage, attempt=attempt, error=repr(exc))
                if self._stopping.is_set() and attempt >= 3:
                    return False
                await asyncio.sleep(backoff_s(min(attempt, 6), 200, 5000))

    # ------------------------------------------------------------------ offsets
    async def _maybe_commit(self) -> None:
        now = time.monotonic()
        if (now - self._last_commit) * 1000 >= self._s.kafka_commit_interval_ms:
            self._last_commit = now
            await self.commit()

    async def commit(self) -> None:
        async with self._commit_lock:
            offsets = {
                tp: o for tp, o in self._tracker.committable().items() if tp in self.consumer.assignment()
            }
            if not offsets:
                return
            try:
                # Bounded: against a restarted embedded broker a commit would retry forever.
                await asyncio.wait_for(self.consumer.commit(offsets), timeout=self._s.kafka_commit_timeout_s)
                self._tracker.mark_committed(offsets)
                self._deliveries.committed(offsets)
            except (KafkaError, TimeoutError) as exc:
                ERRORS.labels(self.stage, "commit_failed").inc()
                log.warning("commit failed; records will be redelivered", stage=self.stage, error=repr(exc))

    async def _wait_tasks(self, tps: set[TopicPartition] | None) -> None:
        tasks = [t for t, tp in self._tasks.items() if tps is None or tp in tps]
        if not tasks:
            return
        done, pending = await asyncio.wait(tasks, timeout=self._s.drain_timeout_s)
        for t in pending:
            t.cancel()
        if pending:
            log.warning(
                "drain timed out; unfinished records will be redelivered", stage=self.stage, n=len(pending)
            )
            await asyncio.gather(*pending, return_exceptions=True)

    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._wait_tasks(set(revoked))
        await self.commit()
        self._tracker.forget(revoked)

    async def _drain(self) -> None:
        await self._wait_tasks(None)
        if self.consumer.assignment():
            await self.commit()
        IN_FLIGHT.labels(self.stage).set(0)

    def _update_lag(self) -> None:
        # highwater comes from the last fetch response and is right on the embedded broker too,
        # unlike end_offsets() there. Lag = records in the partition this consumer has not fetched.
        for tp in self.consumer.assignment():
            hw = self.consumer.highwater(tp)
            nxt = self._tracker.next_offset(tp)
            if hw is not None and nxt is not None:
                CONSUMER_LAG.labels(self.stage, tp.topic, str(tp.partition)).set(max(0, hw - nxt))

