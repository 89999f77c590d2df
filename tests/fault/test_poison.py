"""Poison and fuzz on the ingest topic: 1,000 generated malformed records beside valid traffic.

Every record that is not a readable envelope must land in sy.dlq with a reason (and its original
bytes); a well-formed envelope with bad media is a client error, answered on sy.responses with the
reason (the requester is waiting for it); the stage stays up; every valid record alongside goes on
to sy.prepared. Real broker, real preprocess process.
"""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from hashlib import sha256
from pathlib import Path

import httpx
from switchyard.v1.envelope_pb2 import ChatMessage, ContentPart, ImageUrl, Request, SamplingParams
from switchyard.v1.events_pb2 import DeadLetter

from shared.runtime.bus import decode_record
from shared.runtime.envelope import Envelope, Kind, decode, encode
from tests.helpers.kafka import collect, produce, service_env, services
from tests.helpers.reliability import record

PB, JS = b"application/x-protobuf", b"application/json"
MAX_RECORD = 65536


def chat(rid: str, text: str = "What is 2+2?") -> Envelope:
    """Temperature 0: a request the cache could answer, so preprocess sends it on to sy.prepared."""
    return Envelope(
        request_id=rid,
        tenant="acme",
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        request=Request(
            messages=[ChatMessage(role="user", content=text)], sampling=SamplingParams(temperature=0)
        ),
    )


def malformed(rng: random.Random, i: int) -> tuple[str, bytes, bytes]:
    """One bad record of a class chosen at random: (class, value, content type)."""
    kind = rng.choice(["random", "truncated", "wrong_types", "huge", "bad_utf8", "bad_media", "bad_json"])
    rid = f"bad-{i}"
    if kind == "random":
        return kind, rng.randbytes(rng.randint(1, 300)), rng.choice([PB, JS])
    if kind == "truncated":
        full = encode(chat(rid, "x" * rng.randint(5, 200)))
        return kind, full[: rng.randint(1, len(full) - 1)], PB
    if kind == "wrong_types":
        body = {"request_id": rid, "tenant": "acme", "kind": "KIND_CHAT", "model": "sy-tiny"}
        field, value = rng.choice(
            [
                ("request", {"messages": "not-a-list"}),
                ("request", {"messages": [{"role": 5, "content": []}]}),
                (
                    "request",
                    {"messages": [{"role": "user", "content": "hi"}], "sampling": {"max_tokens": "lots"}},
                ),
                ("kind", 12345),  # proto3 enums are open: decodes, must be refused by validation
                ("priority", 77),
                ("deadline_unix_ms", "tomorrow"),
                ("tenant", {"a": 1}),
            ]
        )
        body[field] = value
        return kind, json.dumps(body).encode(), JS
    if kind == "huge":
        return kind, encode(chat(rid, "y" * (MAX_RECORD + rng.randint(1, 5000)))), PB
    if kind == "bad_utf8":
        raw = json.dumps({"request_id": rid, "tenant": "acme", "model": "sy-tiny"}).encode()
        return kind, raw.replace(b"acme", b"ac\xff\xfeme"), JS
    if kind == "bad_media":
        url = rng.choice(
            [
                "data:image/png;base64," + base64.b64encode(rng.randbytes(64)).decode(),
                "data:image/png;base64,!!!not-base64!!!",
                "s3://no-such-bucket/../../etc/passwd",
                "file:///etc/passwd",
            ]
        )
        e = chat(rid)
        e.request.messages[0].content = ""
        e.request.messages[0].parts.extend(
            [
                ContentPart(type="text", text="what is this?"),
                ContentPart(type="image_url", image_url=ImageUrl(url=url)),
            ]
        )
        return kind, encode(e), PB
    return kind, b'{"request_id": "' + rid.encode() + b'", "tenant": ', JS  # bad_json: cut mid-object


def _paired(
    letters: list[DeadLetter], poison: list[tuple[str, bytes, bytes]]
) -> list[tuple[DeadLetter, bytes]]:
    by_sha = {sha256(v).hexdigest(): v for _, v, _ in poison}
    return [(d, by_sha[d.original_sha256]) for d in letters]


async def test_a_thousand_malformed_records_go_to_the_dlq_with_reasons(broker, topics, var_dir: Path) -> None:
    rng = random.Random(1234)
    env = service_env(broker.bootstrap, topics, var_dir, SY_MAX_RECORD_BYTES=str(MAX_RECORD))
    bad = [malformed(rng, i) for i in range(1000)]
    with services(["preprocess"], env, var_dir) as procs:
        good_ids = []
        for start in range(0, len(bad), 100):  # valid traffic interleaved with every hundred bad ones
            chunk = bad[start : start + 100]
            for ct in (PB, JS):
                values = [v for _, v, c in chunk if c == ct]
                if values:
                    await produce(
                        broker.bootstrap, f"{topics}requests", values, headers=[("content-type", ct)]
                    )
            good = [chat(f"good-{start + j}") for j in range(5)]
            good_ids += [g.request_id for g in good]
            await produce(broker.bootstrap, f"{topics}requests", [encode(g) for g in good])
        media_ids = {decode(v).request_id for k, v, _ in bad if k == "bad_media"}
        poison = [b for b in bad if b[0] != "bad_media"]
        dlq = await collect(broker.bootstrap, f"{topics}dlq", len(poison), timeout_s=120)
        answered = await collect(
            broker.bootstrap,
            f"{topics}responses",
            0,
            timeout_s=120,
            until=lambda rs: media_ids <= {decode_record(r).request_id for r in rs},
        )
        prepared = await collect(broker.bootstrap, f"{topics}prepared", len(good_ids), timeout_s=120)
        port = procs["preprocess"].port
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        assert procs["preprocess"].proc.poll() is None  # never crashed

    letters = [DeadLetter.FromString(r.value) for r in dlq]
    assert len(letters) == len(poison)
    # Each once, known by its sha256 (a dead letter keeps at most a 64 KiB excerpt of the input).
    assert Counter(d.original_sha256 for d in letters) == Counter(sha256(v).hexdigest() for _, v, _ in poison)
    assert all(d.original_value == v[: len(d.original_value)] for d, v in _paired(letters, poison))
    replies = [decode_record(r) for r in answered]
    # A dead letter whose request id could still be read is answered too (its requester waits).
    replied = {e.request_id: e for e in replies}
    assert media_ids <= set(replied) and len(replied) == len(replies)
    assert all(e.error.message and 400 <= e.error.http_status < 500 for e in replies)
    assert all(replied[i].error.stage == "preprocess" for i in media_ids)
    assert not any(e.HasField("request") for e in replies)  # the reply carries the reason, not the bytes
    assert all(d.reason and d.error_code and d.stage == "preprocess" for d in letters)
    by_class: dict[str, set[str]] = {}
    original_class = {sha256(v).hexdigest(): k for k, v, _ in bad}
    for d in letters:
        by_class.setdefault(original_class[d.original_sha256], set()).add(d.error_code)
    assert by_class["huge"] == {"record_too_large"}
    assert by_class["bad_json"] == {"invalid_json"}
    assert sorted(decode(r.value).request_id for r in prepared) == sorted(good_ids)
    record(
        "poison",
        f"{len(letters)} dead letters with reasons for {len(poison)} undecodable/invalid records; "
        f"{len(media_ids)} bad-media requests answered 4xx; {len(prepared)}/{len(good_ids)} valid "
        "requests passed; preprocess never restarted",
    )
