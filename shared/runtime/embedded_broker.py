"""Workarounds for the embedded broker (Tansu), all reaching into aiokafka's private state.

The embedded broker keeps its logs in memory and restarts empty without telling its readers,
may not report end offsets right, and its fetch time grows with the batches a partition holds.
These helpers read aiokafka's per-partition state (`_subscription`, `_fetcher`) to cope; where an
aiokafka lacks those internals they do nothing.

The reset-log rewind runs only when SY_KAFKA_EMBEDDED is true, which the launcher sets when it
starts the embedded broker; on Apache Kafka a high watermark never falls behind a reader's
position. The idle fetch-wait back-off of FetchWaitGuard is wanted on both brokers and always runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

from aiokafka import AIOKafkaConsumer, TopicPartition

from shared.runtime.config import Settings
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


def positions(consumer: AIOKafkaConsumer) -> Iterator[tuple[TopicPartition, int, int | None]]:
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
        behind = [(tp, pos, hw) for tp, pos, hw in positions(consumer) if hw is not None and hw < pos]
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
        return any(hw is not None and hw > pos for _, pos, hw in positions(self.consumer))

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
