"""Read-only views of the broker for `switchyard topics` and the tests: end offsets and lag.

End offsets are read from a fetch response's high watermark, which is right on both Apache
Kafka and the embedded broker (whose ListOffsets answer is the start of the last batch + 1).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from shared.runtime.bus import client_kwargs
from shared.runtime.config import Settings
from shared.runtime.topics import ensure_topics


async def create_topics(settings: Settings) -> list[str]:
    admin = AIOKafkaAdminClient(**client_kwargs(settings))  # type: ignore[arg-type]
    await admin.start()
    try:
        return await ensure_topics(admin, settings)
    finally:
        await admin.close()


async def end_offsets(settings: Settings, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(**client_kwargs(settings), enable_auto_commit=False, fetch_max_wait_ms=50)  # type: ignore[arg-type]
    await consumer.start()
    try:
        if not tps:
            return {}
        consumer.assign(tps)
        listed = await consumer.end_offsets(tps)
        result: dict[TopicPartition, int] = {}
        for tp in tps:
            if listed[tp] == 0:
                result[tp] = 0
            else:
                consumer.seek(tp, listed[tp] - 1)
        todo = [tp for tp in tps if tp not in result]
        deadline = asyncio.get_running_loop().time() + 5
        while todo and asyncio.get_running_loop().time() < deadline:
            await consumer.getmany(*todo, timeout_ms=100, max_records=1)
            for tp in list(todo):
                hw = consumer.highwater(tp)
                if hw is not None:
                    result[tp] = hw
                    todo.remove(tp)
        for tp in todo:  # fall back to what ListOffsets said
            result[tp] = listed[tp]
        return result
    finally:
        await consumer.stop()


@dataclass
class PartitionLag:
    topic: str
    partition: int
    end: int
    group: str | None = None
    committed: int | None = None

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(0, self.end - self.committed)


async def topic_report(settings: Settings, prefix: str | None = None) -> list[PartitionLag]:
    admin = AIOKafkaAdminClient(**client_kwargs(settings))  # type: ignore[arg-type]
    await admin.start()
    try:
        names = sorted(t for t in await admin.list_topics() if t.startswith(prefix or settings.topic_prefix))
        meta = await admin.describe_topics(names)
        tps = [TopicPartition(m["topic"], p["partition"]) for m in meta for p in m["partitions"]]
        ends = await end_offsets(settings, tps)
        rows: list[PartitionLag] = []
        groups = [g for g, _ in await admin.list_consumer_groups()]
        committed_by_tp: dict[TopicPartition, list[tuple[str, int]]] = {}
        for g in groups:
            offsets = await admin.list_consumer_group_offsets(g, partitions=tps)
            for tp, om in offsets.items():
                if om is not None and om.offset >= 0:
                    committed_by_tp.setdefault(tp, []).append((g, om.offset))
        for tp in sorted(tps):
            consumers = committed_by_tp.get(tp) or [(None, None)]
            for g, off in consumers:
                rows.append(PartitionLag(tp.topic, tp.partition, ends.get(tp, 0), g, off))
        return rows
    finally:
        await admin.close()
