"""The canary's Kafka path against the real embedded broker: a JSON envelope onto the ingest topic,
its protobuf reply found on the responses topic by request_id (a stand-in answers for the stack)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from shared.devstack.embedded.canary import Canary, CanaryFailed, KafkaProbe
from shared.runtime.config import Settings, load_settings
from shared.runtime.envelope import Envelope, decode, encode, set_error

Answer = Callable[[Envelope], Envelope | None]


async def _answer(settings: Settings, answer: Answer, stop: asyncio.Event) -> None:
    """What the pipeline does to a record on sy.requests, reduced to one reply on sy.responses;
    other replies go out first, as other requests' would."""
    consumer = AIOKafkaConsumer(
        settings.topic("requests"),
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
    )
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=100)).values():
                for rec in records:
                    ct = dict(rec.headers).get("content-type", b"").decode()
                    env = decode(rec.value, ct)
                    reply = answer(env)
                    if reply is None:
                        continue
                    other = Envelope(request_id="someone-else", tenant="t", model=env.model)
                    await producer.send_and_wait(
                        settings.topic("responses"), encode(other), key=b"someone-else"
                    )
                    await producer.send_and_wait(
                        settings.topic("responses"), encode(reply), key=env.request_id.encode()
                    )
    finally:
        await producer.stop()
        await consumer.stop()


@pytest.fixture
async def stack(topics: str) -> AsyncIterator[tuple[Settings, dict[str, Answer]]]:
    settings = load_settings()
    mode: dict[str, Answer] = {"answer": lambda env: env}
    stop = asyncio.Event()
    task = asyncio.create_task(_answer(settings, lambda env: mode["answer"](env), stop))
    yield settings, mode
    stop.set()
    await task


async def test_kafka_probe_finds_its_reply_and_reports_error_replies(
    stack: tuple[Settings, dict[str, Answer]],
) -> None:
    settings, mode = stack
    seen: list[Envelope] = []

    def ok(env: Envelope) -> Envelope:
        seen.append(env)
        return env

    mode["answer"] = ok
    probe = KafkaProbe(settings, "local", "sy-tiny", timeout_s=20)
    await asyncio.wait_for(probe(), timeout=20)
    sent = seen[-1]
    assert sent.request_id.startswith("canary-") and sent.tenant == "local" and sent.model == "sy-tiny"
    assert sent.request.sampling.max_tokens == 1 and sent.request.sampling.temperature == 1.0
    assert sent.deadline_unix_ms > 0

    mode["answer"] = lambda env: set_error(env, "no_pool", "no pool serves sy-tiny", "router", 503)
    with pytest.raises(CanaryFailed, match="no_pool"):
        await asyncio.wait_for(probe(), timeout=20)


async def test_no_reply_fails_the_canary_within_its_timeout(
    stack: tuple[Settings, dict[str, Answer]],
) -> None:
    settings, mode = stack
    mode["answer"] = lambda env: None
    lines: list[str] = []
    canary = Canary(
        {"kafka": KafkaProbe(settings, "local", "sy-tiny", timeout_s=3)},
        interval_s=1,
        timeout_s=3,
        say=lines.append,
    )
    assert await canary.round() is False
    assert not canary.ready() and "no answer within 3s" in canary.failures["kafka"]
    mode["answer"] = lambda env: env
    assert await canary.round() is True
    assert canary.ready() and lines[-1].startswith("canary: recovered")
