"""A reader without a group across an embedded-broker restart (memory storage: the logs start empty)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from shared.devstack.embedded.kafka import EmbeddedKafka
from shared.runtime.config import Settings
from shared.runtime.follow import follow
from tests.helpers.kafka import produce


async def _topic(bootstrap: str, name: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        await admin.close()


async def _until(cond, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


@pytest.mark.parametrize("embedded", [True, False], ids=["embedded", "not-embedded"])
def test_a_reader_reads_a_restarted_brokers_new_log_from_its_start(tmp_path: Path, embedded: bool) -> None:
    """Before the restart the reader is at offset 30; the new log holds 3 records. Without the
    rewind it waits (no out-of-range error from the embedded broker) and sees none of them: the
    rewind runs only with SY_KAFKA_EMBEDDED, which the launcher sets for the embedded broker."""
    kafka = EmbeddedKafka(tmp_path / "kafka")
    kafka.start()
    topic = "reset-probe"
    seen: list[bytes] = []

    async def run() -> None:
        await _topic(kafka.bootstrap, topic)
        await produce(kafka.bootstrap, topic, [f"old-{i}".encode() for i in range(30)])
        settings = Settings(
            kafka_bootstrap=kafka.bootstrap, var_dir=tmp_path / "var", kafka_embedded=embedded
        )
        stop = asyncio.Event()
        reader = asyncio.create_task(follow(settings, topic, lambda r: seen.append(r.value), stop))
        try:
            assert await _until(lambda: len(seen) == 30, 30), seen
            kafka.restart()
            await _topic(kafka.bootstrap, topic)
            await produce(kafka.bootstrap, topic, [b"new-0", b"new-1", b"new-2"])
            if not embedded:  # Apache Kafka's behaviour is assumed: no rewind, the reader waits
                assert not await _until(lambda: len(seen) > 30, 5), seen[30:]
                return
            assert await _until(lambda: len(seen) == 33, 30), seen[30:]
            assert seen[30:] == [b"new-0", b"new-1", b"new-2"]
        finally:
            stop.set()
            await asyncio.wait_for(reader, 30)

    try:
        asyncio.run(run())
    finally:
        kafka.stop()


def test_a_producer_with_stale_metadata_sends_to_the_partition_it_named(tmp_path: Path) -> None:
    """After a broker restart a producer's cached metadata can lack a partition the re-created
    topic has (aiokafka raises 'Unrecognized partition' and, unrefreshed, keeps the stale view for
    metadata_max_age_ms: the router stalled that way for a minute). The producer looks the topic
    up again before giving up on the partition, so the record goes, at once, to the partition it
    named (a reply to the gateway replica that reads only that one); a partition the topic really
    lacks gives way to the key. The stale view is made by dropping the partition from the
    client's cache; the broker and the topic are real."""
    from shared.runtime.bus import OutRecord, Producer
    from shared.runtime.config import load_settings

    kafka = EmbeddedKafka(tmp_path / "kafka")
    kafka.start()

    async def run() -> dict[bytes, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("stale-probe", 4, 1)])
        finally:
            await admin.close()
        producer = Producer(load_settings(kafka_bootstrap=kafka.bootstrap, env="dev"))
        await producer.start()
        try:
            await producer.send(OutRecord("stale-probe", b"warm", partition=0))
            cluster = producer._p.client.cluster  # noqa: SLF001 - the cache a restart leaves stale
            cluster._partitions["stale-probe"].pop(3)  # noqa: SLF001
            await producer.send(OutRecord("stale-probe", b"after", key=b"k", partition=3))
            await producer.send(OutRecord("stale-probe", b"nowhere", key=b"k", partition=99))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "stale-probe", bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        where: dict[bytes, int] = {}
        try:
            deadline = asyncio.get_running_loop().time() + 20
            while len(where) < 3 and asyncio.get_running_loop().time() < deadline:
                for tp, recs in (await consumer.getmany(timeout_ms=500)).items():
                    where.update({r.value: tp.partition for r in recs})
        finally:
            await consumer.stop()
        return where

    try:
        where = asyncio.run(run())
    finally:
        kafka.stop()
    assert where.get(b"after") == 3, where
    assert where.get(b"nowhere") in {0, 1, 2, 3}, where
