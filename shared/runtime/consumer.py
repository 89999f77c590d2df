"""The stage consumer: the stage rules of DESIGN.md §3, on aiokafka.

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

What one record becomes (retries, dead letters) is shared.runtime.attempts; records, headers and
the producer are shared.runtime.bus; dead letters shared.runtime.dead_letters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from shared.runtime.attempts import Handler, RecordAttempts
from shared.runtime.bus import OutRecord, Producer, backoff_s, client_kwargs, sent_ns
from shared.runtime.config import Settings
from shared.runtime.dead_letters import FINAL_PRODUCE_ERRORS, DeadHook, bounded
from shared.runtime.deliveries import DeliveryLog
from shared.runtime.embedded_broker import FetchWaitGuard, positions, rewind_reset_logs
from shared.runtime.envelope import ErrorCode
from shared.runtime.telemetry import (
    CONSUMER_LAG,
    ERRORS,
    IN_FLIGHT,
    QUEUE_WAIT_SECONDS,
    RECORDS,
    STAGE_SECONDS,
    STALLED,
    get_logger,
)

log = get_logger(__name__)

__all__ = ["OffsetTracker", "StageConsumer"]


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
        self._producer = producer
        self._s = settings
        self._max_in_flight = max_in_flight or settings.stage_max_in_flight
        self._tracker = OffsetTracker()
        self._tasks: dict[asyncio.Task[None], TopicPartition] = {}
        self._stopping = asyncio.Event()
        self._attempts = RecordAttempts(
            stage=stage,
            handler=handler,
            settings=settings,
            dlq_topic=dlq_topic,
            topics=self.topics,
            on_dead=on_dead,
            stopping=self._stopping,
        )
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
            return any(hw is not None and hw > pos for _, pos, hw in positions(self.consumer))
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
                reset = rewind_reset_logs(self.consumer, self.stage) if self._s.kafka_embedded else []
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

    async def _process(self, tp: TopicPartition, rec: ConsumerRecord, delivery: int = 1) -> None:
        t0 = time.perf_counter()
        sent = sent_ns(rec)
        if sent is not None:
            QUEUE_WAIT_SECONDS.labels(self.stage, rec.topic).observe(max(0, time.time_ns() - sent) / 1e9)
        result = await self._attempts.run(rec, delivery)
        if result is None:
            return  # stopped while a dependency was down: uncommitted, handled after the restart
        outputs, outcome = result.outputs, result.outcome
        published = await self._publish(outputs)
        if published is None and outcome == "ok":
            # The broker refused the outputs for good: the input goes to the DLQ instead, once.
            outputs, outcome = (
                self._attempts.dead_outputs(rec, ErrorCode.PRODUCE_REJECTED, self._refusal, result.attempts),
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
