"""Read whole topics without a consumer group: state topics, replies, rewards.

Every process that needs a topic's content reads all of its partitions itself; nothing is
committed. `Follower` is the one loop for that (assign, seek, poll, rewind a log the broker lost,
adapt the fetch wait, restart after a broker hiccup); its owner says where to start and what to
do with each poll's records. `follow()` is the per-record form for state topics.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from shared.runtime.bus import client_kwargs, off_path_wait_ms
from shared.runtime.config import Settings
from shared.runtime.embedded_broker import FetchWaitGuard, rewind_reset_logs
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

Edge = Literal["beginning", "end"]
# Where to start each partition, given its end offset: an offset, or an edge; a partition the
# mapping leaves out starts at the end.
StartFn = Callable[
    [Mapping[TopicPartition, int]],
    Mapping[TopicPartition, int | Edge] | Awaitable[Mapping[TopicPartition, int | Edge]],
]
OnBatch = Callable[[list[ConsumerRecord]], Awaitable[None] | None]
OnReset = Callable[[list[TopicPartition]], Awaitable[None] | None]
# Which of a topic's partitions to read, given all of them (a reader that owns only some).
PartitionFilter = Callable[[str, list[int]], Awaitable[list[int]]]


async def _call(fn: Callable[..., Awaitable[None] | None], *args: object) -> None:
    """Run a callback that may be sync or async."""
    result = fn(*args)
    if asyncio.iscoroutine(result):
        await result


class Follower:
    """One reader of all partitions of `topics`, without a group.

    - `start`: "beginning", "end" (a record sent once `ready` is set is read), or a function of
      the partitions' end offsets giving each partition's start (resume from saved offsets).
    - `on_batch(records)` runs after every poll, with an empty list when nothing came: owners
      that do periodic work (save offsets, check a deadline) need no task of their own.
    - `on_reset(partitions)` runs when a partition's log restarted behind the reader (a broker
      that lost its data, as the embedded one does on restart); the reader has already rewound.
    - `ready` is set once every partition has its start position; `caught_up` once every
      position reached the high watermark of the first fetches, or after `caught_up_polls`
      empty polls in a row (the embedded broker may not report a high watermark).
    - `guard` adapts the fetch wait (idle back-off, lagging fetches); `wake()` after sending
      what will be answered on these topics.
    - `partitions(topic, all)`: the partitions of each topic to read (default: all); after
      `reassign()` it is asked again and the reader moves to the new set, keeping its position
      on the partitions it keeps and starting new ones from `start`.
    - `run(stop)`: an error (broker down, a callback raising) is logged and, after
      `restart_after_s`, the reader starts again from `start` with a new consumer; with
      `restart_after_s=None` the error propagates (the service stops and is restarted).
    """

    def __init__(
        self,
        settings: Settings,
        topics: Sequence[str],
        *,
        name: str,
        on_batch: OnBatch,
        start: Edge | StartFn = "beginning",
        on_reset: OnReset | None = None,
        fetch_wait_ms: int | None = None,
        poll_ms: int = 100,
        fetch_guard: bool = True,
        offset_reset: Literal["earliest", "latest"] = "earliest",
        caught_up_polls: int = 20,
        restart_after_s: float | None = 1.0,
        partitions: PartitionFilter | None = None,
    ) -> None:
        self.settings, self.topics, self.name = settings, list(topics), name
        self.partitions = partitions
        self._reassign = asyncio.Event()
        self.on_batch, self.start, self.on_reset = on_batch, start, on_reset
        # Off the reply path by default: on the embedded broker every held fetch costs polls.
        self.fetch_wait_ms = off_path_wait_ms(settings) if fetch_wait_ms is None else fetch_wait_ms
        self.poll_ms, self.fetch_guard, self.offset_reset = poll_ms, fetch_guard, offset_reset
        self.caught_up_polls, self.restart_after_s = caught_up_polls, restart_after_s
        self.ready = asyncio.Event()
        self.caught_up = asyncio.Event()
        self.guard: FetchWaitGuard | None = None
        self._consumer: AIOKafkaConsumer | None = None

    def reassign(self) -> None:
        """The partition filter's answer changed: move to the new set at the next poll."""
        self._reassign.set()

    def wake(self) -> None:
        """Records are expected soon: short fetch waits again (see FetchWaitGuard.wake)."""
        if self.guard is not None:
            self.guard.wake()

    async def positions(self, topic: str | None = None) -> dict[TopicPartition, int]:
        """Next offset to read of each assigned partition (of `topic` only, if given); empty
        while no consumer is running."""
        consumer = self._consumer
        if consumer is None:
            return {}
        return {
            tp: await consumer.position(tp)
            for tp in sorted(consumer.assignment())
            if topic is None or tp.topic == topic
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until `stop` is set; see the class docstring for errors."""
        while not stop.is_set():
            try:
                await self._run_once(stop)
            except Exception as exc:  # noqa: BLE001 - a broker hiccup must not stop the owner
                if self.restart_after_s is None:
                    raise
                log.warning("follower failed; reading again", reader=self.name, error=repr(exc))
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.restart_after_s)
                except TimeoutError:
                    pass

    async def _run_once(self, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(
            **client_kwargs(self.settings),  # type: ignore[arg-type]
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset=self.offset_reset,
            fetch_max_wait_ms=self.fetch_wait_ms,
            max_partition_fetch_bytes=self.settings.kafka_max_request_bytes,
            client_id=f"{self.name}-{self.settings.instance_id}",
        )
        try:
            await consumer.start()  # inside: a start that fails is stopped too (no unclosed client)
            self._consumer = consumer
            tps = await self._partitions(consumer, stop)
            if stop.is_set():
                return
            consumer.assign(tps)
            await self._seek(consumer, tps)
            self.ready.set()
            if self.fetch_guard:
                self.guard = FetchWaitGuard.from_settings(consumer, self.name, self.settings)
            await self._poll(consumer, tps, stop)
        finally:
            self._consumer = None
            await consumer.stop()

    async def _partitions(self, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> list[TopicPartition]:
        """Every partition of every topic, once the broker knows them all (a topic may not exist yet)."""
        while not stop.is_set():
            await consumer.topics()  # refresh metadata
            parts = {t: consumer.partitions_for_topic(t) or set() for t in self.topics}
            if all(parts.values()):
                self._reassign.clear()
                chosen = {
                    t: (await self.partitions(t, sorted(ps)) if self.partitions is not None else sorted(ps))
                    for t, ps in parts.items()
                }
                return [TopicPartition(t, p) for t in self.topics for p in chosen[t]]
            try:
                await asyncio.wait_for(stop.wait(), timeout=0.5)
            except TimeoutError:
                pass
        return []

    async def _seek(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        if self.start == "beginning":
            await consumer.seek_to_beginning(*tps)
            return
        starts: Mapping[TopicPartition, int | Edge] = {}
        if callable(self.start):
            found = self.start(await consumer.end_offsets(tps))
            starts = await found if inspect.isawaitable(found) else found
        for tp in tps:
            at = starts.get(tp, "end")
            if at == "beginning":
                await consumer.seek_to_beginning(tp)
            elif at == "end":
                await consumer.seek_to_end(tp)
                await consumer.position(tp)  # resolved now: a record sent from here on is read
            else:
                consumer.seek(tp, int(at))

    async def _poll(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition], stop: asyncio.Event) -> None:
        t0, empty = time.monotonic(), 0
        while not stop.is_set():
            if self._reassign.is_set():
                tps = await self._move(consumer, stop)
            batch = await consumer.getmany(timeout_ms=self.poll_ms)
            if self.guard is not None:
                self.guard.observe(bool(batch))
            rewound = rewind_reset_logs(consumer, self.name) if self.settings.kafka_embedded else []
            if rewound and self.on_reset is not None:
                await _call(self.on_reset, rewound)
            await _call(self.on_batch, [rec for records in batch.values() for rec in records])
            if not self.caught_up.is_set():
                empty = 0 if batch else empty + 1
                if empty >= self.caught_up_polls or await self._at_end(consumer, tps):
                    self.caught_up.set()
                    log.info("follower caught up", reader=self.name, seconds=round(time.monotonic() - t0, 3))

    async def _move(self, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> list[TopicPartition]:
        """Read the partitions the filter names now: kept ones go on from where they were."""
        kept = {tp: await consumer.position(tp) for tp in consumer.assignment()}
        tps = await self._partitions(consumer, stop)
        consumer.assign(tps)
        for tp, at in kept.items():
            if tp in tps:
                consumer.seek(tp, at)
        new = [tp for tp in tps if tp not in kept]
        if new:
            await self._seek(consumer, new)
        log.info(
            "follower reassigned",
            reader=self.name,
            partitions=sorted(f"{t.topic}:{t.partition}" for t in tps),
        )
        return tps

    @staticmethod
    async def _at_end(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> bool:
        for tp in tps:
            hw = consumer.highwater(tp)
            if hw is None or await consumer.position(tp) < hw:
                return False
        return True


async def follow(
    settings: Settings,
    topic: str,
    on_record: Callable[[ConsumerRecord], Awaitable[None] | None],
    stop: asyncio.Event,
    *,
    from_beginning: bool = True,
    client_id: str = "follower",
    on_reset: Callable[[], None] | None = None,
) -> None:
    """Read every partition of a state topic (heartbeats, adapter events) without a group.

    Every process that needs the state reads all of it; nothing is committed. A handler
    error is logged and the record skipped: state topics are advisory, never poison.
    `on_reset` runs when the topic's log restarted behind the reader (a broker that lost its
    data): the owner of the state publishes it again. A broker error propagates, as it always
    did (callers retry, or their service restarts); no fetch-wait guard, as before.
    """

    async def on_batch(records: list[ConsumerRecord]) -> None:
        for rec in records:
            try:
                await _call(on_record, rec)
            except Exception as exc:  # noqa: BLE001 - see docstring
                log.warning("state record skipped", topic=topic, offset=rec.offset, error=str(exc))

    follower = Follower(
        settings,
        [topic],
        name=client_id,
        on_batch=on_batch,
        start="beginning" if from_beginning else "end",
        on_reset=(lambda _tps: on_reset()) if on_reset is not None else None,
        poll_ms=200,
        fetch_guard=False,
        offset_reset="latest",  # aiokafka's default, which follow() always had
        restart_after_s=None,
    )
    await follower.run(stop)
