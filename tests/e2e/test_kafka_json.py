"""Kafka for any client, end to end (docs/kafka.md): a plain aiokafka producer writes JSON with
`"kind": "chat"` to sy.requests and reads a JSON reply (and JSON stream deltas) from the stack
without any of Switchyard's code: no generated protobuf, no helper of ours. A bad record's
dead letter says why in its headers, and its requester gets a JSON error reply.

The same again with confluent-kafka (librdkafka), the client library of kcat and most non-Python
clients.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.e2e.conftest import Pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

JSON_CT = [("content-type", b"application/json")]


def request(rid: str, **over: object) -> bytes:
    body: dict = {
        "request_id": rid,
        "tenant": "tenant-a",
        "kind": "chat",
        "model": "sy-tiny",
        "request": {
            "messages": [{"role": "user", "content": "Repeat: maple"}],
            "sampling": {"max_tokens": 8, "temperature": 0},
        },
    }
    body.update(over)
    return json.dumps(body).encode()


def headers_of(rec) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {k: (v or b"").decode() for k, v in rec.headers}


async def read_until(bootstrap: str, topic: str, want: set[str], timeout_s: float = 120) -> dict:
    """Records of `topic` keyed by request id (the record key), from the start, until every id
    in `want` has one; a plain consumer with no group, as any client would run it."""
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None)
    await c.start()
    found: dict[str, list] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while not want <= set(found) and time.monotonic() < deadline:
            for records in (await c.getmany(timeout_ms=500)).values():
                for rec in records:
                    key = (rec.key or b"").decode(errors="replace")
                    if key in want:
                        found.setdefault(key, []).append(rec)
    finally:
        await c.stop()
    assert want <= set(found), f"no record on {topic} for {want - set(found)}"
    return found


async def test_a_plain_kafka_client_gets_json_replies_and_reads_dead_letters(pipeline: Pipeline) -> None:
    bootstrap = pipeline.endpoints["kafka"]
    # The embedded broker says which port it took and why (9092 when it was free).
    why = "Kafka's default port" if bootstrap.endswith(":9092") else "9092 is in use"
    assert f"embedded Tansu broker on {bootstrap} ({why}" in pipeline.log_path.read_text(errors="replace")

    run = uuid.uuid4().hex[:8]
    plain, streamed, bad = f"kj-{run}", f"kj-stream-{run}", f"kj-bad-{run}"
    stream_body = request(streamed, priority="Interactive")
    stream_req = json.loads(stream_body)
    stream_req["request"]["sampling"]["stream"] = True
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await p.start()
    try:
        for rid, value in (
            (plain, request(plain)),
            (streamed, json.dumps(stream_req).encode()),
            (bad, request(bad, kind="chatty")),
        ):
            await p.send_and_wait("sy.requests", value, key=rid.encode(), headers=JSON_CT)
    finally:
        await p.stop()

    replies = await read_until(bootstrap, "sy.responses", {plain, streamed, bad})
    for rid in (plain, streamed):
        (rec,) = replies[rid]
        assert headers_of(rec)["content-type"] == "application/json"
        reply = json.loads(rec.value)
        assert reply["request_id"] == rid and reply["kind"] == "KIND_CHAT" and "error" not in reply, reply
        assert reply["response"]["usage"]["completion_tokens"] >= 1
        assert reply["response"]["choices"][0]["finish_reason"]
    (rec,) = replies[bad]
    assert headers_of(rec)["content-type"] == "application/json"
    err = json.loads(rec.value)["error"]
    assert err["code"] == "schema_invalid" and "chatty" in err["message"] and err["stage"] == "preprocess"

    # The stream of a JSON request is JSON too, and adds up to the final text.
    deltas = (await read_until(bootstrap, "sy.stream", {streamed}))[streamed]
    assert all(headers_of(d)["content-type"] == "application/json" for d in deltas)
    final = json.loads(replies[streamed][0].value)["response"]["choices"][0]["text"]
    texts = {}
    for d in deltas:
        for ch in json.loads(d.value).get("choices", []):
            texts[ch.get("text_offset", 0)] = ch.get("text", "")
    assert "".join(texts[k] for k in sorted(texts)) == final

    # The dead letter's reason is in its headers, readable without our schema.
    letters = await read_until(bootstrap, "sy.dlq", {bad})
    h = headers_of(letters[bad][0])
    assert h["sy-error-code"] == "schema_invalid" and "chatty" in h["sy-error-reason"]
    assert h["sy-error-stage"] == "preprocess" and h["sy-source-topic"] == "sy.requests"
    assert h["sy-source-partition"].isdigit() and h["sy-source-offset"].isdigit()

    # The gateway's replies stay protobuf and its reader is not thrown by JSON ones.
    r = httpx.post(
        pipeline.base_url + "/chat/completions",
        headers={"Authorization": "Bearer sk-a"},
        timeout=60,
        json={
            "model": "sy-tiny",
            "messages": [{"role": "user", "content": "Repeat: maple"}],
            "max_tokens": 8,
            "temperature": 0,
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == final


def test_a_librdkafka_client_confluent_kafka(pipeline: Pipeline) -> None:
    """The same with confluent-kafka (librdkafka, what kcat and most non-Python clients use):
    partitions assigned, no group, as docs/kafka.md shows."""
    ck = pytest.importorskip("confluent_kafka")
    bootstrap = pipeline.endpoints["kafka"]
    run = uuid.uuid4().hex[:8]
    good, bad = f"ck-{run}", f"ck-bad-{run}"
    p = ck.Producer({"bootstrap.servers": bootstrap})
    p.produce("sy.requests", request(good, priority="batch"), key=good, headers=JSON_CT)
    p.produce("sy.requests", request(bad, kind=True), key=bad, headers=JSON_CT)
    assert p.flush(30) == 0

    def read(topic: str, key: str) -> object:
        c = ck.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"docs-{run}", "enable.auto.commit": False}
        )
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([ck.TopicPartition(topic, i, ck.OFFSET_BEGINNING) for i in parts])
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is not None and not m.error() and m.key() == key.encode():
                    return m
        finally:
            c.close()
        raise AssertionError(f"no record for {key} on {topic}")

    m = read("sy.responses", good)
    assert dict(m.headers())["content-type"] == b"application/json"
    reply = json.loads(m.value())
    assert reply["kind"] == "KIND_CHAT" and reply["priority"] == "PRIORITY_BATCH" and "error" not in reply
    assert reply["response"]["choices"][0]["finish_reason"]
    h = dict(read("sy.dlq", bad).headers())
    assert h["sy-error-code"] == b"schema_invalid" and b"of type bool" in h["sy-error-reason"]
    assert json.loads(read("sy.responses", bad).value())["error"]["code"] == "schema_invalid"
