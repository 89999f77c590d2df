"""shared.runtime.bus stage rules against the real broker, in-process: retries, DLQ, drain, bounded in-flight."""

from __future__ import annotations

import asyncio

from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import DeadLetter

from shared.runtime.bus import OutRecord, Producer
from shared.runtime.config import Settings, load_settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.kafka_admin import topic_report
from tests.helpers.kafka import collect, produce


def _settings(broker, prefix: str, **kw) -> Settings:
    base = dict(
        kafka_bootstrap=broker.bootstrap,
        topic_prefix=prefix,
        kafka_session_timeout_ms=2000,
        kafka_heartbeat_interval_ms=500,
        kafka_commit_interval_ms=20,
        stage_retry_backoff_ms=10,
        stage_retry_backoff_max_ms=50,
        drain_timeout_s=10,
    )
    base.update(kw)
    return load_settings(**base)


async def _run(settings: Settings, handler, **kw) -> tuple[StageConsumer, asyncio.Task, Producer]:
    producer = Producer(settings)
    await producer.start()
    consumer = StageConsumer(
        stage="test",
        topics=[settings.topic("requests")],
        group_id=f"{settings.topic_prefix}g",
        handler=handler,
        producer=producer,
        settings=settings,
        dlq_topic=settings.topic("dlq"),
        **kw,
    )
    task = asyncio.create_task(consumer.run())
    for _ in range(200):
        if consumer.assigned():
            break
        await asyncio.sleep(0.05)
    return consumer, task, producer


async def _group_lag(settings: Settings) -> int:
    rows = [r for r in await topic_report(settings) if r.topic == settings.topic("requests")]
    mine = [r for r in rows if r.group == f"{settings.topic_prefix}g"]
    return sum(r.lag or 0 for r in mine) if mine else -1


async def test_transient_failures_are_retried_then_permanent_ones_dead_lettered(broker, topics) -> None:
    s = _settings(broker, topics, stage_max_attempts=3)
    attempts: dict[bytes, int] = {}

    async def handler(rec: ConsumerRecord) -> list[OutRecord]:
        attempts[rec.value] = attempts.get(rec.value, 0) + 1
        if rec.value == b"flaky" and attempts[rec.value] < 3:
            raise ConnectionError("engine busy")
        if rec.value == b"broken":
            raise ValueError("cannot handle this")
        return [OutRecord(s.topic("prepared"), rec.value.upper())]

    consumer, task, producer = await _run(s, handler)
    await produce(broker.bootstrap, s.topic("requests"), [b"flaky", b"broken", b"fine"])
    out = await collect(broker.bootstrap, s.topic("prepared"), 2)
    dlq = await collect(broker.bootstrap, s.topic("dlq"), 1)
    await consumer.stop()
    await task
    await producer.stop()
    assert sorted(r.value for r in out) == [b"FINE", b"FLAKY"]
    assert attempts == {b"flaky": 3, b"broken": 3, b"fine": 1}
    (dl,) = [DeadLetter.FromString(r.value) for r in dlq]
    assert dl.error_code == "retries_exhausted" and dl.attempts == 3
    assert "ValueError: cannot handle this" in dl.reason and dl.original_value == b"broken"
    assert await _group_lag(s) == 0


async def test_stop_drains_in_flight_records_and_commits(broker, topics) -> None:
    s = _settings(broker, topics)
    started = asyncio.Event()
    peak = 0
    running = 0

    async def slow(rec: ConsumerRecord) -> list[OutRecord]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        started.set()
        await asyncio.sleep(0.5)
        running -= 1
        return [OutRecord(s.topic("prepared"), rec.value)]

    consumer, task, producer = await _run(s, slow, max_in_flight=4)
    await produce(broker.bootstrap, s.topic("requests"), [f"v{i}".encode() for i in range(12)])
    await asyncio.wait_for(started.wait(), 20)
    await consumer.stop()  # what SIGTERM does: stop fetching, finish what is in flight, commit
    await asyncio.wait_for(task, 20)
    await producer.stop()
    assert peak <= 4, "in-flight bound exceeded"
    out = await collect(broker.bootstrap, s.topic("prepared"), 1, timeout_s=3, until=lambda r: False)
    finished = {r.value for r in out}
    assert finished, "in-flight records were abandoned instead of drained"
    # Everything finished is committed; a restarted consumer gets exactly the rest.
    seen: list[bytes] = []

    async def record(rec: ConsumerRecord) -> list[OutRecord]:
        seen.append(rec.value)
        return []

    consumer2, task2, producer2 = await _run(s, record)
    for _ in range(100):
        if len(seen) + len(finished) >= 12:
            break
        await asyncio.sleep(0.1)
    await consumer2.stop()
    await task2
    await producer2.stop()
    assert set(seen) | finished == {f"v{i}".encode() for i in range(12)}
    assert not set(seen) & finished, "drained records were redelivered: commit after drain missing"


async def test_an_idle_stage_polls_less_and_still_takes_the_next_record(broker, topics) -> None:
    """SY_KAFKA_IDLE_*: on aiokafka's real fetcher the wait rises while idle and drops with a record."""
    s = _settings(broker, topics, kafka_idle_after_s=0.3, kafka_idle_fetch_wait_ms=200)
    got: list[bytes] = []

    async def record(rec: ConsumerRecord) -> list[OutRecord]:
        got.append(rec.value)
        return []

    consumer, task, producer = await _run(s, record)
    fetcher = consumer.consumer._fetcher
    for _ in range(100):
        if fetcher._fetch_max_wait_ms == 200:
            break
        await asyncio.sleep(0.05)
    assert fetcher._fetch_max_wait_ms == 200, "an idle stage kept polling at the short wait"
    await produce(broker.bootstrap, s.topic("requests"), [b"after-idle"])
    for _ in range(100):
        if got:
            break
        await asyncio.sleep(0.05)
    assert got == [b"after-idle"]
    assert fetcher._fetch_max_wait_ms == s.kafka_fetch_max_wait_ms, "the wait stayed long after a record"
    await consumer.stop()
    await task
    await producer.stop()
