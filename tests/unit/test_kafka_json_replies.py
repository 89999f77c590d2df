"""Kafka for any client (docs/kafka.md): JSON in gives JSON out on sy.responses, the
`sy-reply-format` header overrides it both ways, the format survives the pipeline's protobuf
hops, and enum fields take short names (`"kind": "chat"`) while hostile values are refused."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import ChoiceDelta, StreamDelta

from services.preprocess.ingest import ingest_check
from shared.runtime.bus import decode_delta, decode_record, delta_value, header
from shared.runtime.config import Settings
from shared.runtime.dead_letters import dead_letter
from shared.runtime.envelope import (
    Envelope,
    ErrorCode,
    Kind,
    Priority,
    Rejected,
    ReplyFormat,
    encode,
    from_json,
    reply_format_for,
    set_error,
    validate,
)
from shared.runtime.stage import Emit, envelope_handler, error_reply_hook, out_record

JS, PB = b"application/json", b"application/x-protobuf"
SETTINGS = Settings()
REQUESTS, PREPARED, RESPONSES = (SETTINGS.topic(t) for t in ("requests", "prepared", "responses"))


def body(**over: object) -> dict:
    b: dict = {
        "request_id": "r-1",
        "tenant": "acme",
        "kind": "chat",
        "model": "sy-tiny",
        "request": {"messages": [{"role": "user", "content": "hi"}]},
    }
    b.update(over)
    return b


def record(topic: str, value: bytes, headers: list[tuple[str, bytes]]) -> ConsumerRecord:
    return ConsumerRecord(
        topic=topic,
        partition=0,
        offset=7,
        timestamp=0,
        timestamp_type=0,
        key=b"r-1",
        value=value,
        checksum=None,
        serialized_key_size=3,
        serialized_value_size=len(value),
        headers=headers,
    )


# ------------------------------------------------------------------ enum short names
@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("chat", Kind.KIND_CHAT),
        ("Chat", Kind.KIND_CHAT),
        ("CHAT", Kind.KIND_CHAT),
        ("KIND_CHAT", Kind.KIND_CHAT),
        ("kind_chat", Kind.KIND_CHAT),
        ("completion", Kind.KIND_COMPLETION),
        ("rollout", Kind.KIND_ROLLOUT),
        (3, Kind.KIND_EMBEDDING),  # the JSON mapping's number form
    ],
)
def test_kind_takes_short_names_in_any_case(value: object, kind: int) -> None:
    assert from_json(json.dumps(body(kind=value))).kind == kind


@pytest.mark.parametrize(
    ("value", "priority"),
    [
        ("interactive", Priority.PRIORITY_INTERACTIVE),
        ("BATCH", Priority.PRIORITY_BATCH),
        ("Rollout", Priority.PRIORITY_ROLLOUT),
        ("PRIORITY_BATCH", Priority.PRIORITY_BATCH),
    ],
)
def test_priority_takes_short_names(value: str, priority: int) -> None:
    assert from_json(json.dumps(body(priority=value))).priority == priority


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("kind", "CHAT ", "'CHAT '"),  # no trimming: a name is exact but for case
        ("kind", "chatt", "chat, completion, embedding, rollout"),
        ("kind", "unspecified", "'unspecified'"),  # no short name for "not set"
        ("kind", "", "''"),
        ("kind", True, "of type bool"),  # ParseDict would read it as 1, KIND_CHAT
        ("kind", 1.0, "of type float"),
        ("kind", ["chat"], "of type list"),
        ("kind", {"chat": 1}, "of type dict"),
        ("priority", "urgent", "interactive, batch, rollout"),
        ("reply_format", "xml", "protobuf, json"),
    ],
)
def test_unknown_enum_names_are_a_schema_error_with_the_choices(
    field: str, value: object, needle: str
) -> None:
    with pytest.raises(Rejected) as exc:
        from_json(json.dumps(body(**{field: value})))
    assert exc.value.code == ErrorCode.SCHEMA_INVALID
    assert field in exc.value.reason and needle in exc.value.reason


def test_unspecified_and_unknown_numbers_parse_but_do_not_validate() -> None:
    with pytest.raises(Rejected, match="kind is required"):
        validate(from_json(json.dumps(body(kind="KIND_UNSPECIFIED"))))
    with pytest.raises(Rejected, match="kind 99 is not one of"):
        validate(from_json(json.dumps(body(kind=99))))
    with pytest.raises(Rejected, match="reply_format 7 is not one of"):
        validate(from_json(json.dumps(body(reply_format=7))))
    assert from_json(json.dumps(body(reply_format=2))).reply_format == ReplyFormat.REPLY_FORMAT_JSON


# ------------------------------------------------------------------ the reply format decision
@pytest.mark.parametrize(
    ("content_type", "asked", "field", "want"),
    [
        ("application/json", None, 0, ReplyFormat.REPLY_FORMAT_JSON),  # JSON in, JSON out
        ("application/json; charset=utf-8", None, 0, ReplyFormat.REPLY_FORMAT_JSON),
        ("application/x-protobuf", None, 0, ReplyFormat.REPLY_FORMAT_UNSPECIFIED),  # protobuf
        (None, None, 0, ReplyFormat.REPLY_FORMAT_UNSPECIFIED),
        ("application/x-protobuf", "json", 0, ReplyFormat.REPLY_FORMAT_JSON),  # header: both ways
        ("application/json", "protobuf", 0, ReplyFormat.REPLY_FORMAT_PROTOBUF),
        ("application/json", " PROTOBUF ", 0, ReplyFormat.REPLY_FORMAT_PROTOBUF),
        ("application/x-protobuf", None, ReplyFormat.REPLY_FORMAT_JSON, ReplyFormat.REPLY_FORMAT_JSON),
        ("application/json", None, ReplyFormat.REPLY_FORMAT_PROTOBUF, ReplyFormat.REPLY_FORMAT_PROTOBUF),
        (
            "application/x-protobuf",
            "protobuf",
            ReplyFormat.REPLY_FORMAT_JSON,
            ReplyFormat.REPLY_FORMAT_PROTOBUF,
        ),
    ],
)
def test_reply_format_header_then_field_then_content_type(
    content_type: str | None, asked: str | None, field: int, want: int
) -> None:
    assert reply_format_for(content_type, asked, Envelope(reply_format=field)) == want


@pytest.mark.parametrize("asked", ["xml", "", "json5", "application/json"])
def test_a_bad_reply_format_header_is_refused(asked: str) -> None:
    with pytest.raises(Rejected) as exc:
        reply_format_for("application/json", asked, Envelope())
    assert exc.value.code == ErrorCode.INVALID_REQUEST and "sy-reply-format" in exc.value.reason


def test_only_replies_are_json_and_every_other_record_stays_protobuf() -> None:
    env = from_json(json.dumps(body(reply_format="json")))
    env.response.choices.add(text="hello")
    reply = out_record(Emit(RESPONSES, env), RESPONSES)
    assert header(reply.headers, "content-type") == "application/json"
    plain = json.loads(reply.value)  # a client needs no generated code
    assert plain["request_id"] == "r-1" and plain["kind"] == "KIND_CHAT"
    assert plain["response"]["choices"][0]["text"] == "hello"
    onward = out_record(Emit(PREPARED, env), RESPONSES)
    assert header(onward.headers, "content-type") == "application/x-protobuf"
    assert Envelope.FromString(onward.value).reply_format == ReplyFormat.REPLY_FORMAT_JSON
    # Without the replies topic named (a stage that answers nobody): protobuf.
    assert header(out_record(Emit(RESPONSES, env)).headers, "content-type") == "application/x-protobuf"
    # A request that did not ask: protobuf on sy.responses too.
    env.reply_format = ReplyFormat.REPLY_FORMAT_UNSPECIFIED
    assert out_record(Emit(RESPONSES, env), RESPONSES).value == encode(env)


def run_stage(stage: str, rec: ConsumerRecord, to: str, check=None) -> list:  # type: ignore[no-untyped-def]
    async def handle(env: Envelope) -> list[Emit]:
        if to == RESPONSES:
            env.response.choices.add(text="ok")
        return [Emit(to, env)]

    on_record = envelope_handler(stage, handle, check=check, replies=RESPONSES)
    return asyncio.run(on_record(rec))


@pytest.mark.parametrize(
    ("value", "headers", "json_reply"),
    [
        (json.dumps(body()).encode(), [("content-type", JS)], True),
        (json.dumps(body()).encode(), [("content-type", JS), ("sy-reply-format", b"protobuf")], False),
        (encode(from_json(json.dumps(body()))), [("content-type", PB)], False),
        (encode(from_json(json.dumps(body()))), [("content-type", PB), ("sy-reply-format", b"json")], True),
        (encode(from_json(json.dumps(body()))), [], False),  # the gateway's requests: protobuf
    ],
)
def test_the_reply_format_survives_the_pipeline(value: bytes, headers: list, json_reply: bool) -> None:
    """Ingest (preprocess, with its check) -> sy.prepared (protobuf) -> a worker's reply."""
    (prepared,) = run_stage("preprocess", record(REQUESTS, value, headers), PREPARED, ingest_check(SETTINGS))
    assert header(prepared.headers, "content-type") == "application/x-protobuf"
    rec = record(PREPARED, prepared.value, prepared.headers)
    (reply,) = run_stage("worker", rec, RESPONSES)
    want = "application/json" if json_reply else "application/x-protobuf"
    assert header(reply.headers, "content-type") == want
    got = decode_record(record(RESPONSES, reply.value, reply.headers))
    assert got.request_id == "r-1" and got.response.choices[0].text == "ok"
    if json_reply:
        assert json.loads(reply.value)["response"]["choices"][0]["text"] == "ok"


def test_a_bad_reply_format_header_is_dead_lettered_and_answered_in_json() -> None:
    rec = record(REQUESTS, json.dumps(body()).encode(), [("content-type", JS), ("sy-reply-format", b"xml")])
    with pytest.raises(Rejected) as exc:
        run_stage("preprocess", rec, PREPARED, ingest_check(SETTINGS))
    dl = dead_letter(rec, "preprocess", exc.value.code, exc.value.reason, 1, 65536)
    (reply,) = error_reply_hook("preprocess", SETTINGS)(rec, dl)
    assert header(reply.headers, "content-type") == "application/json"
    err = json.loads(reply.value)["error"]
    assert err["code"] == "invalid_request" and "sy-reply-format" in err["message"]


@pytest.mark.parametrize(
    ("value", "headers", "want"),
    [
        # Undecodable (an unknown kind): the ids are read out of the JSON, the reply is JSON.
        (json.dumps(body(kind="chatty")).encode(), [("content-type", JS)], "application/json"),
        (
            json.dumps(body(kind="chatty")).encode(),
            [("content-type", JS), ("sy-reply-format", b"protobuf")],
            "application/x-protobuf",
        ),
        (encode(Envelope(request_id="r-1", tenant="acme")), [("content-type", PB)], "application/x-protobuf"),
        (
            encode(Envelope(request_id="r-1", tenant="acme")),
            [("sy-reply-format", b"json")],
            "application/json",
        ),
    ],
)
def test_error_replies_of_dead_records_follow_the_request(value: bytes, headers: list, want: str) -> None:
    rec = record(REQUESTS, value, headers)
    with pytest.raises(Rejected) as exc:
        run_stage("preprocess", rec, PREPARED, ingest_check(SETTINGS))
    dl = dead_letter(rec, "preprocess", exc.value.code, exc.value.reason, 1, 65536)
    (reply,) = error_reply_hook("preprocess", SETTINGS)(rec, dl)
    assert header(reply.headers, "content-type") == want
    got = decode_record(record(RESPONSES, reply.value, reply.headers))
    assert got.request_id == "r-1" and got.error.code == exc.value.code and got.error.stage == "preprocess"


def test_a_later_stage_error_reply_keeps_the_format() -> None:
    """A worker's record that dies after retries: its reply is JSON as its request asked."""
    env = from_json(json.dumps(body()))
    env.reply_format = ReplyFormat.REPLY_FORMAT_JSON
    rec = record(SETTINGS.topic("infer.vllm"), encode(env), [("content-type", PB)])
    dl = dead_letter(rec, "vllm_worker", "retries_exhausted", "engine kept failing", 3, 65536)
    (reply,) = error_reply_hook("vllm_worker", SETTINGS)(rec, dl)
    assert header(reply.headers, "content-type") == "application/json"
    assert json.loads(reply.value)["error"]["code"] == "retries_exhausted"


def test_readers_decode_either_format() -> None:
    env = set_error(from_json(json.dumps(body())), "no_pool", "no pool", "router", 404)
    for fmt in (ReplyFormat.REPLY_FORMAT_JSON, ReplyFormat.REPLY_FORMAT_UNSPECIFIED):
        env.reply_format = fmt
        out = out_record(Emit(RESPONSES, env), RESPONSES)
        assert decode_record(record(RESPONSES, out.value, out.headers)) == env


def test_stream_deltas_follow_the_reply_format() -> None:
    delta = StreamDelta(
        request_id="r-1", tenant="acme", choices=[ChoiceDelta(index=0, text="he", text_offset=0)]
    )
    value, headers = delta_value(delta, ReplyFormat.REPLY_FORMAT_JSON)
    assert header(headers, "content-type") == "application/json"
    assert json.loads(value)["choices"][0]["text"] == "he"
    assert decode_delta(record("sy.stream", value, headers)) == delta
    value, headers = delta_value(delta, ReplyFormat.REPLY_FORMAT_UNSPECIFIED)
    assert header(headers, "content-type") == "application/x-protobuf" and value == delta.SerializeToString()
    assert decode_delta(record("sy.stream", value, headers)) == delta
