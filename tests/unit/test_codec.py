from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from switchyard.v1.envelope_pb2 import ChatMessage, ContentPart, MediaRef, Request, SamplingParams, Timing

from shared.runtime.envelope import (
    Envelope,
    Kind,
    Rejected,
    decode,
    encode,
    from_json,
    to_json,
    validate,
)


def sample() -> Envelope:
    e = Envelope(
        request_id="r-1",
        tenant="acme",
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        adapter="math@3",
        request=Request(
            messages=[ChatMessage(role="user", parts=[ContentPart(type="text", text="hé ✓")])],
            sampling=SamplingParams(max_tokens=16, temperature=0.0, n=2, stop=["\n"]),
        ),
        media=[MediaRef(uri="file://x", sha256="ab" * 32, width=4, height=3, modality="image")],
        timings=[Timing(stage="preprocess", start_ns=1, end_ns=2, attrs={"k": "v"})],
        deadline_unix_ms=123,
    )
    e.metadata["trace"] = "yes"
    return e


def test_protobuf_round_trip() -> None:
    e = sample()
    assert decode(encode(e)) == e
    assert decode(encode(e), "application/x-protobuf; charset=binary") == e


def test_json_round_trip_in_protobuf_json_mapping() -> None:
    e = sample()
    text = to_json(e)
    obj = json.loads(text)
    assert obj["kind"] == "KIND_CHAT" and obj["request"]["sampling"]["max_tokens"] == 16
    assert from_json(text) == e
    assert decode(text.encode(), "application/json") == e
    # camelCase (the canonical JSON names) is accepted too.
    camel = json_format.MessageToJson(e)
    assert "requestId" in camel and from_json(camel) == e


def test_optional_fields_keep_unset_apart_from_zero() -> None:
    e = from_json('{"request": {"sampling": {"temperature": 0}}}')
    assert e.request.sampling.HasField("temperature") and e.request.sampling.temperature == 0
    assert not e.request.sampling.HasField("top_p")


@pytest.mark.parametrize(
    ("text", "code", "needle"),
    [
        ("{not json", "invalid_json", "not valid JSON"),
        ('["a"]', "schema_invalid", "JSON object"),
        ('{"modle": "x"}', "schema_invalid", "modle"),
        ('{"kind": "KIND_BOGUS"}', "schema_invalid", "KIND_BOGUS"),
        ('{"request": {"messages": "no"}}', "schema_invalid", "messages"),
        ('{"request": {"sampling": {"max_tokens": "many"}}}', "schema_invalid", "max_tokens"),
    ],
)
def test_json_errors_are_rejections_with_reasons(text: str, code: str, needle: str) -> None:
    with pytest.raises(Rejected) as exc:
        from_json(text)
    assert exc.value.code == code
    assert needle in exc.value.reason


def test_bad_protobuf_and_content_type() -> None:
    with pytest.raises(Rejected) as exc:
        decode(b"\xff\xff\xff\xff")
    assert exc.value.code == "bad_protobuf"
    with pytest.raises(Rejected) as exc:
        decode(b"x", "text/plain")
    assert exc.value.code == "unsupported_content_type" and exc.value.http_status == 415
    # invalid UTF-8 in a string field is refused, not passed on
    bad = Envelope(request_id="r").SerializeToString().replace(b"r", b"\xff")
    with pytest.raises(Rejected):
        decode(bad)


def test_unknown_protobuf_fields_pass_through() -> None:
    """A newer producer's fields survive a stage that does not know them (DESIGN §2)."""
    extra = encode(sample()) + b"\xa0\x1f\x07"  # field 500, varint 7
    e = decode(extra)
    assert encode(e).endswith(b"\xa0\x1f\x07")


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda e: setattr(e, "request_id", ""), "request_id"),
        (lambda e: setattr(e, "request_id", "a b"), "request_id"),
        (lambda e: setattr(e, "tenant", ""), "tenant"),
        (lambda e: setattr(e, "kind", Kind.KIND_UNSPECIFIED), "kind"),
        (lambda e: setattr(e, "model", ""), "model"),
        (lambda e: e.request.ClearField("messages"), "messages"),
        (lambda e: setattr(e.request.messages[0], "role", "robot"), "role"),
        (lambda e: setattr(e.request.sampling, "temperature", 3.0), "temperature"),
        (lambda e: setattr(e.request.sampling, "n", 0), "sampling.n"),
        (lambda e: setattr(e.request.sampling, "top_p", 0.0), "top_p"),
        (lambda e: setattr(e.request.messages[0].parts[0], "type", "video"), "video"),
    ],
)
def test_validate_names_the_bad_field(mutate, needle: str) -> None:
    e = sample()
    validate(e)
    mutate(e)
    with pytest.raises(Rejected) as exc:
        validate(e)
    assert exc.value.code == "invalid_request"
    assert needle in exc.value.reason


def test_completion_needs_prompt() -> None:
    e = Envelope(request_id="r", tenant="t", kind=Kind.KIND_COMPLETION, model="m")
    with pytest.raises(Rejected, match="prompt"):
        validate(e)
    e.request.prompt = "Once"
    validate(e)


_text = st.text(max_size=40)
envelopes = st.builds(
    lambda rid, tenant, model, texts, mt, temp, stops, meta, ts: _mk(
        rid, tenant, model, texts, mt, temp, stops, meta, ts
    ),
    _text,
    _text,
    _text,
    st.lists(_text, max_size=4),
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    st.one_of(st.none(), st.floats(0, 2, width=32)),
    st.lists(_text, max_size=3),
    st.dictionaries(_text, _text, max_size=3),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
)


def _mk(rid, tenant, model, texts, mt, temp, stops, meta, ts) -> Envelope:
    e = Envelope(request_id=rid, tenant=tenant, model=model, kind=Kind.KIND_CHAT)
    for t in texts:
        e.request.messages.add(role="user", content=t)
    if mt is not None:
        e.request.sampling.max_tokens = mt
    if temp is not None:
        e.request.sampling.temperature = temp
    e.request.sampling.stop.extend(stops)
    for k, v in meta.items():
        e.metadata[k] = v
    for t in ts:
        e.timings.add(stage="s", start_ns=t, end_ns=t)
    return e


@settings(max_examples=200, deadline=None)
@given(envelopes)
def test_property_both_codecs_round_trip(e: Envelope) -> None:
    assert decode(encode(e)) == e
    assert from_json(to_json(e)) == e


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_property_decode_never_crashes(data: bytes) -> None:
    """Any bytes either decode or raise Rejected: never another exception (no crash loop)."""
    for ct in (None, "application/json"):
        try:
            e = decode(data, ct)
        except Rejected:
            continue
        try:
            validate(e)
        except Rejected:
            pass


def test_unknown_enum_numbers_are_refused() -> None:
    from shared.runtime.envelope import Rejected, validate

    e = Envelope(request_id="r", tenant="acme", kind=Kind.KIND_CHAT, model="m")
    e.request.messages.add(role="user", content="hi")
    validate(e)
    for field, value, needle in (("kind", 12345, "kind 12345"), ("priority", 77, "priority 77")):
        bad = Envelope()
        bad.CopyFrom(e)
        setattr(bad, field, value)
        with pytest.raises(Rejected, match=needle):
            validate(bad)
