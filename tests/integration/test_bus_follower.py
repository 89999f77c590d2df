"""shared.runtime.follow.Follower against the real embedded broker: start positions, caught_up,
on_batch on every poll, and a restart after a failing callback."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from shared.runtime.follow import Edge, Follower
from shared.runtime.periodic import every
from tests.helpers.kafka import produce
from tests.integration.test_bus import _settings


async def _until(cond, timeout_s: float = 20) -> bool:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_from_the_beginning_it_catches_up_and_polls_even_when_empty(broker, topics) -> None:
    s = _settings(broker, topics)
    topic = s.topic("rewards")
    await produce(broker.bootstrap, topic, [b"a", b"b", b"c"])
    seen: list[bytes] = []
    polls = [0]

    def on_batch(records: list[ConsumerRecord]) -> None:
        polls[0] += 1
        seen.extend(r.value for r in records)

    f = Follower(s, [topic], name="t-rewards", on_batch=on_batch)
    stop = asyncio.Event()
    task = asyncio.create_task(f.run(stop))
    try:
        await asyncio.wait_for(f.caught_up.wait(), 20)
        assert sorted(seen) == [b"a", b"b", b"c"]
        n = polls[0]
        assert await _until(lambda: polls[0] > n + 2)  # empty polls reach on_batch too
        assert sum((await f.positions(topic)).values()) == 3
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_from_the_end_or_saved_offsets_and_a_restart_after_an_error(broker, topics) -> None:
    s = _settings(broker, topics)
    responses, stream = s.topic("responses"), s.topic("stream")
    await produce(broker.bootstrap, responses, [b"r0", b"r1", b"r2"], keys=[b"k"] * 3)  # one partition
    await produce(broker.bootstrap, stream, [b"old"])
    seen: list[bytes] = []
    fail = [True]

    def start(ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | Edge]:
        return {tp: 1 for tp in ends if tp.topic == responses and ends[tp] >= 1}

    def on_batch(records: list[ConsumerRecord]) -> None:
        if records and fail[0]:
            fail[0] = False
            raise RuntimeError("first batch fails")
        seen.extend(r.value for r in records)

    f = Follower(
        s, [responses, stream], name="t-replies", on_batch=on_batch, start=start, restart_after_s=0.1
    )
    stop = asyncio.Event()
    task = asyncio.create_task(f.run(stop))
    try:
        # The failed batch is read again from `start` by a new consumer.
        assert await _until(lambda: b"r2" in seen), seen
        f.wake()
        await produce(broker.bootstrap, stream, [b"new"])
        assert await _until(lambda: b"new" in seen), seen
        assert b"r0" not in seen and b"old" not in seen
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_every_survives_a_failing_call() -> None:
    calls: list[int] = []
    stop = asyncio.Event()

    def chore() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("once")
        if len(calls) == 3:
            stop.set()

    await asyncio.wait_for(every(0.01, chore, stop, name="chore"), 5)
    assert len(calls) == 3


async def test_every_fatal_lets_the_failure_end_the_task() -> None:
    """The router's fail-over and the batch service's Celery watch: a failure ends the service
    (its supervisor restarts it) rather than repeating every period."""
    calls: list[int] = []

    def chore() -> None:
        calls.append(1)
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError, match="broken"):
        await asyncio.wait_for(every(0.01, chore, asyncio.Event(), name="chore", fatal=True), 5)
    assert len(calls) == 1


async def test_a_partition_filter_and_a_reassign_keep_positions_and_start_new_partitions(
    broker, topics
) -> None:
    """The gateway's reply reader (reply_lease.py): it reads its own partitions; on reassign the
    kept ones go on where they were, a new one starts where `start` says, a dropped one stops."""
    from shared.runtime.bus import OutRecord, Producer

    s = _settings(broker, topics)
    topic = s.topic("responses")
    producer = Producer(s)
    await producer.start()
    seen: list[tuple[int, bytes]] = []
    owned = [[0]]

    async def choose(_topic: str, parts: list[int]) -> list[int]:
        return [p for p in owned[-1] if p in parts]

    def starts(ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | Edge]:
        return {tp: "beginning" for tp in ends}

    f = Follower(
        s,
        [topic],
        name="t-lease",
        on_batch=lambda rs: seen.extend((r.partition, r.value) for r in rs),
        start=starts,
        partitions=choose,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(f.run(stop))
    try:
        await producer.send_all([OutRecord(topic, b"p1-early", partition=1)])
        await asyncio.wait_for(f.ready.wait(), 20)
        await producer.send_all([OutRecord(topic, b"p0-a", partition=0)])
        assert await _until(lambda: (0, b"p0-a") in seen)
        assert all(p == 0 for p, _ in seen)  # partition 1 is not ours
        owned.append([0, 1])
        f.reassign()
        await producer.send_all([OutRecord(topic, b"p0-b", partition=0)])
        assert await _until(lambda: (1, b"p1-early") in seen and (0, b"p0-b") in seen)
        assert [v for p, v in seen if p == 0] == [b"p0-a", b"p0-b"]  # kept: not read again
        owned.append([1])
        f.reassign()
        await asyncio.sleep(0.5)
        await producer.send_all(
            [OutRecord(topic, b"p0-c", partition=0), OutRecord(topic, b"p1-b", partition=1)]
        )
        assert await _until(lambda: (1, b"p1-b") in seen)
        await asyncio.sleep(0.3)
        assert (0, b"p0-c") not in seen  # dropped
        # A partition the topic lacks (a hostile reply_to) is produced by key instead of failing.
        await producer.send_all([OutRecord(topic, b"nowhere", key=b"k", partition=4096)])
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await producer.stop()
