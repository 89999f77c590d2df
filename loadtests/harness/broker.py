"""What a workload wrote to the broker: records and bytes per topic between two points in time.

The log end of every partition is read before the workload; afterwards each partition is read
from that offset to its new end and the records are counted with their key, value and header
bytes (what a producer sends, without the batch framing). The embedded broker keeps every byte
until it restarts, so bytes per request is what decides how long it runs.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

Ends = dict[TopicPartition, int]


async def _consumer(bootstrap: str) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    return consumer


async def _partitions(consumer: AIOKafkaConsumer) -> list[TopicPartition]:
    topics = sorted(t for t in await consumer.topics() if not t.startswith("__"))
    return [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or ())]


def record_bytes(record: Any) -> int:
    """Key, value and header bytes of one consumed record."""
    size = len(record.key or b"") + len(record.value or b"")
    return size + sum(len(k.encode()) + len(v or b"") for k, v in record.headers or ())


async def read_from(
    bootstrap: str, starts: Ends | None = None, quiet_s: float = 1.0, timeout_s: float = 120
) -> tuple[Ends, dict[str, dict[str, int]]]:
    """Read every partition from `starts` (default: the beginning) until nothing more comes for
    `quiet_s`: the positions reached and topic -> {"records", "bytes"} read on the way.

    It reads rather than asks for end offsets: the embedded broker may not report them right
    (shared/runtime/embedded_broker.py)."""
    consumer = await _consumer(bootstrap)
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"records": 0, "bytes": 0})
    try:
        parts = await _partitions(consumer)
        consumer.assign(parts)
        for tp in parts:
            consumer.seek(tp, (starts or {}).get(tp, 0))
        deadline = time.monotonic() + timeout_s
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < quiet_s:
            batches = await consumer.getmany(timeout_ms=200, max_records=5000)
            if any(batches.values()):
                quiet_since = time.monotonic()
            for tp, records in batches.items():
                out[tp.topic]["records"] += len(records)
                out[tp.topic]["bytes"] += sum(record_bytes(r) for r in records)
        return {tp: await consumer.position(tp) for tp in parts}, dict(out)
    finally:
        await consumer.stop()


async def log_ends(bootstrap: str) -> Ends:
    """Where every partition's log ends now (read to the end)."""
    return (await read_from(bootstrap))[0]


async def written_since(bootstrap: str, starts: Ends) -> dict[str, dict[str, int]]:
    """topic -> {"records", "bytes"} written since `starts` (partitions new since then count from 0)."""
    return (await read_from(bootstrap, starts))[1]
