"""Issue 32 stage rules against the real broker: a dead letter is final, outputs are bounded,
any failure ends in one dead letter, outages are waited out, and readiness means flowing."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import DeadLetter

from shared.runtime.bus import OutRecord, Producer, header
from shared.runtime.dead_letters import DLQ_EXCERPT_MAX
from shared.runtime.envelope import DependencyUnavailable, ErrorCode, Rejected
from tests.helpers.kafka import collect, produce
from tests.integration.test_bus import _run, _settings

BIG = 2 * 1024 * 1024


async def _quiet(bootstrap: str, topic: str, seconds: float) -> int:
    """How many records a topic holds after `seconds` more of quiet (grows if anything loops)."""
    await asyncio.sleep(seconds)
    return len(await collect(bootstrap, topic, 0, timeout_s=2, until=lambda r: False))


async def test_a_dead_letter_is_final_and_its_reply_never_reenters_the_stage(
    broker, topics, tmp_path
) -> None:
    """The loop of issue 32: a reader of sy.responses dead-letters a record and replies on
    sy.responses, which it reads again. Here the stage's error reply targets its own topic."""
    s = _settings(broker, topics, var_dir=tmp_path, max_record_bytes=1 << 20)
    seen: list[int] = []

    async def handler(rec: ConsumerRecord) -> list[OutRecord]:
        seen.append(rec.offset)
        raise Rejected(ErrorCode.INVALID_REQUEST, "not for me")

    def reply_to_own_topic(rec: ConsumerRecord, dl: DeadLetter) -> list[OutRecord]:
        return [OutRecord(s.topic("requests"), b"error reply")]

    consumer, task, producer = await _run(s, handler, on_dead=reply_to_own_topic)
    try:
        await produce(broker.bootstrap, s.topic("requests"), [b"x" * 100, b"y" * (BIG)])
        dlq = await collect(broker.bootstrap, s.topic("dlq"), 2, timeout_s=30)
        assert len(dlq) == 2
        # Quiet afterwards: nothing more in either topic, nothing read again.
        assert await _quiet(broker.bootstrap, s.topic("dlq"), 3) == 2
        assert (
            len(await collect(broker.bootstrap, s.topic("requests"), 0, timeout_s=2, until=lambda r: False))
            == 2
        )
        assert len(seen) == 1  # the big one never reached the handler; the small one once
    finally:
        await consumer.stop()
        await task
        await producer.stop()
    big = next(r for r in dlq if DeadLetter.FromString(r.value).original_size == BIG)
    dl = DeadLetter.FromString(big.value)
    assert dl.error_code == "record_too_large" and dl.truncated
    assert len(dl.original_value) == DLQ_EXCERPT_MAX and len(big.value) < 70 * 1024
    assert dl.original_sha256 == hashlib.sha256(b"y" * BIG).hexdigest()
    # Any Kafka tool reads why without our schema.
    assert header(big.headers, "sy-error-code") == "record_too_large"
    assert "SY_MAX_RECORD_BYTES" in (header(big.headers, "sy-error-reason") or "")
    assert header(big.headers, "sy-error-stage") == "test"
    assert header(big.headers, "sy-source-topic") == s.topic("requests")


async def test_an_oversized_output_dead_letters_its_input_once(broker, topics, tmp_path) -> None:
    s = _settings(broker, topics, var_dir=tmp_path, max_record_bytes=64 * 1024)

    async def echo_big(rec: ConsumerRecord) -> list[OutRecord]:
        return [OutRecord(s.topic("prepared"), rec.value * 1000)]

    consumer, task, producer = await _run(s, echo_big)
    try:
        await produce(broker.bootstrap, s.topic("requests"), [b"z" * 1000, b"ok"])
        dlq = await collect(broker.bootstrap, s.topic("dlq"), 1, timeout_s=30)
        out = await collect(broker.bootstrap, s.topic("prepared"), 1, timeout_s=30)
        assert await _quiet(broker.bootstrap, s.topic("dlq"), 2) == 1
    finally:
        await consumer.stop()
        await task
        await producer.stop()
    (dl,) = [DeadLetter.FromString(r.value) for r in dlq]
    assert dl.error_code == "output_too_large" and dl.original_value == b"z" * 1000
    assert [r.value for r in out] == [b"ok" * 1000]


async def test_any_exception_and_a_hung_handler_end_in_one_dead_letter(broker, topics, tmp_path) -> None:
    s = _settings(broker, topics, var_dir=tmp_path, stage_max_attempts=2, stage_handler_timeout_s=0.5)
    calls: dict[bytes, int] = {}

    class Weird(Exception):
        pass

    async def handler(rec: ConsumerRecord) -> list[OutRecord]:
        calls[rec.value] = calls.get(rec.value, 0) + 1
        if rec.value == b"hang":
            await asyncio.sleep(3600)
        if rec.value == b"weird":
            raise Weird("odd")
        if rec.value == b"key":
            return [{"not": "a record"}[rec.value.decode()]]  # KeyError
        return [OutRecord(s.topic("prepared"), rec.value)]

    consumer, task, producer = await _run(s, handler)
    try:
        await produce(broker.bootstrap, s.topic("requests"), [b"hang", b"weird", b"key", b"fine"])
        dlq = await collect(broker.bootstrap, s.topic("dlq"), 3, timeout_s=30)
        out = await collect(broker.bootstrap, s.topic("prepared"), 1, timeout_s=30)
        assert await _quiet(broker.bootstrap, s.topic("dlq"), 2) == 3
    finally:
        await consumer.stop()
        await task
        await producer.stop()
    letters = {DeadLetter.FromString(r.value).original_value: DeadLetter.FromString(r.value) for r in dlq}
    assert set(letters) == {b"hang", b"weird", b"key"}
    assert "SY_STAGE_HANDLER_TIMEOUT_S" in letters[b"hang"].reason
    assert "Weird: odd" in letters[b"weird"].reason and "KeyError" in letters[b"key"].reason
    assert calls == {b"hang": 2, b"weird": 2, b"key": 2, b"fine": 1}
    assert [r.value for r in out] == [b"fine"]


async def test_a_dependency_outage_is_waited_out_not_dead_lettered(broker, topics, tmp_path) -> None:
    s = _settings(broker, topics, var_dir=tmp_path, stage_max_attempts=2, stage_retry_backoff_max_ms=100)
    down_until = time.monotonic() + 3.0
    calls = 0

    async def handler(rec: ConsumerRecord) -> list[OutRecord]:
        nonlocal calls
        calls += 1
        if time.monotonic() < down_until:
            raise DependencyUnavailable("object_store", "connection refused")
        return [OutRecord(s.topic("prepared"), rec.value)]

    consumer, task, producer = await _run(s, handler)
    try:
        await produce(broker.bootstrap, s.topic("requests"), [b"a", b"b"])
        out = await collect(broker.bootstrap, s.topic("prepared"), 2, timeout_s=30)
        dlq = await collect(broker.bootstrap, s.topic("dlq"), 0, timeout_s=1, until=lambda r: False)
    finally:
        await consumer.stop()
        await task
        await producer.stop()
    assert sorted(r.value for r in out) == [b"a", b"b"]
    assert dlq == []
    assert calls > 2 * s.stage_max_attempts  # far more tries than the attempt limit, none counted


async def test_readiness_turns_false_while_records_wait_without_progress(broker, topics, tmp_path) -> None:
    s = _settings(broker, topics, var_dir=tmp_path, stall_after_s=1.0)
    release = asyncio.Event()

    async def handler(rec: ConsumerRecord) -> list[OutRecord]:
        await release.wait()
        return []

    consumer, task, producer = await _run(s, handler)
    try:
        assert consumer.flowing()
        await asyncio.sleep(1.5)
        assert consumer.flowing(), "an idle stage is not stalled"
        await produce(broker.bootstrap, s.topic("requests"), [b"stuck"])
        for _ in range(100):
            if consumer.waiting():
                break
            await asyncio.sleep(0.05)
        assert consumer.flowing()  # the stall clock starts with the work
        await asyncio.sleep(1.3)
        assert not consumer.flowing()
        release.set()
        for _ in range(100):
            if consumer.flowing():
                break
            await asyncio.sleep(0.05)
        assert consumer.flowing()
    finally:
        release.set()
        await consumer.stop()
        await task
        await producer.stop()


async def test_a_producer_that_cannot_deliver_reports_it_until_a_send_succeeds(
    broker, topics, tmp_path
) -> None:
    s = _settings(
        broker, topics, var_dir=tmp_path, kafka_max_request_bytes=64 * 1024, max_record_bytes=32 * 1024
    )
    producer = Producer(s)
    await producer.start()
    try:
        assert producer.deliverable(stall_after_s=0)
        with pytest.raises(KafkaError):
            await producer.send(OutRecord(s.topic("prepared"), b"x" * 200_000))
        assert not producer.deliverable(stall_after_s=0)  # failing since a moment ago
        assert producer.deliverable(stall_after_s=60)  # ... but not for SY_STALL_AFTER_S yet
        await producer.send(OutRecord(s.topic("prepared"), b"fine"))
        assert producer.deliverable(stall_after_s=0)
    finally:
        await producer.stop()
