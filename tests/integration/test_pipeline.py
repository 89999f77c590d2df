"""preprocess -> cache -> router against the real embedded broker, as separate processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from opentelemetry.sdk.trace import TracerProvider
from switchyard.v1.envelope_pb2 import ChatMessage, Request, SamplingParams
from switchyard.v1.events_pb2 import DeadLetter

from shared.runtime.bus import decode_record, header
from shared.runtime.envelope import Envelope, Kind, decode, encode, to_json
from shared.runtime.telemetry import inject_headers, trace_id_of
from tests.helpers.kafka import collect, produce, service_env, services

STAGES = ["preprocess", "cache", "router"]
PROMPT_MARKER = "What is 2+2? zq-prompt-marker-7f3a"


def chat(rid: str, text: str = "What is 2+2?", temperature: float | None = 0.0) -> Envelope:
    """Temperature 0 by default: a request the cache could answer (None: unset, i.e. sampled)."""
    sampling = SamplingParams(temperature=temperature) if temperature is not None else SamplingParams()
    return Envelope(
        request_id=rid,
        tenant="acme",
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        request=Request(messages=[ChatMessage(role="user", content=text)], sampling=sampling),
    )


def _traceparent() -> tuple[list[tuple[str, bytes]], str]:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("client") as span:
        headers = inject_headers([("content-type", b"application/x-protobuf")])
        return headers, format(span.get_span_context().trace_id, "032x")


async def test_record_reaches_pool_topic_with_timings_and_one_trace(broker, topics, var_dir: Path) -> None:
    env = service_env(broker.bootstrap, topics, var_dir)
    with services(STAGES, env, var_dir) as procs:
        headers, trace_id = _traceparent()
        await produce(
            broker.bootstrap, f"{topics}requests", [encode(chat("r-proto", PROMPT_MARKER))], headers=headers
        )
        as_json = json.dumps(
            {
                "request_id": "r-json",
                "tenant": "acme",
                "kind": "KIND_CHAT",
                "model": "sy-tiny",
                "request": {
                    "messages": [{"role": "user", "content": "hi"}],
                    "sampling": {"max_tokens": 8, "temperature": 0},
                },
            }
        )
        await produce(
            broker.bootstrap,
            f"{topics}requests",
            [as_json.encode()],
            headers=[("content-type", b"application/json")],
        )
        await produce(broker.bootstrap, f"{topics}requests", [encode(chat("r-sampled", temperature=None))])
        out = await collect(broker.bootstrap, f"{topics}infer.vllm", 3)
        metrics = httpx.get(f"http://127.0.0.1:{procs['preprocess'].port}/metrics").text
    assert 'sy_records_total{outcome="ok",stage="preprocess"} 3.0' in metrics
    assert f'sy_queue_wait_seconds_count{{stage="preprocess",topic="{topics}requests"}} 3.0' in metrics
    assert 'sy_in_flight{stage="preprocess"}' in metrics and "sy_consumer_lag" in metrics
    assert len(out) == 3
    # No prompt in the logs unless configured (issue 33): the services log sizes and ids, not text.
    logs = {p.name: p.read_text() for p in var_dir.glob("*.log")}
    assert set(logs) >= {f"{s}.log" for s in STAGES}
    assert not [name for name, text in logs.items() if PROMPT_MARKER in text]
    by_id = {decode(r.value).request_id: r for r in out}
    assert set(by_id) == {"r-proto", "r-json", "r-sampled"}
    # A sampled request (temperature unset = 1) is one the cache could never answer: preprocess
    # sends it straight to the router, one hop less.
    sampled = decode(by_id["r-sampled"].value)
    assert [t.attrs["topic"] for t in sampled.timings if t.stage == "queue"] == [
        f"{topics}requests",
        f"{topics}routing",
    ]
    assert "cache" not in {t.stage for t in sampled.timings}

    rec = by_id["r-proto"]
    got = decode(rec.value)
    top = [t.stage for t in got.timings if "parent" not in t.attrs]  # sub-rows name their parent stage
    assert top == ["queue", "preprocess", "queue", "cache", "queue", "router"]
    route = [t for t in got.timings if t.stage == "route"]
    assert len(route) == 1 and route[0].attrs["pool"] == "vllm" and route[0].attrs["reason"]
    hops = [t.attrs["topic"] for t in got.timings if t.stage == "queue"]
    assert hops == [f"{topics}requests", f"{topics}prepared", f"{topics}routing"]
    for t in got.timings:
        assert 0 <= t.end_ns - t.start_ns < 10e9
    starts = [t.start_ns for t in got.timings if "parent" not in t.attrs]
    assert starts == sorted(starts), "timings are in pipeline order"
    assert got.pool == "vllm"
    assert rec.key == got.request_id.encode()  # base requests need no affinity: spread by request id
    # One trace across the three stages, continuing the producer's context.
    assert trace_id_of(rec.headers) == trace_id
    json_rec = by_id["r-json"]
    assert decode(json_rec.value).request.sampling.max_tokens == 8

    spans = _read_spans(var_dir / "spans.jsonl", trace_id, want=3)
    assert {s["service"] for s in spans} == {f"switchyard-{s}" for s in STAGES}
    # Each stage's span is the child of the one before it (linked across Kafka hops).
    by_name = {s["name"]: s for s in spans}
    assert by_name["cache"]["parent_span_id"] == by_name["preprocess"]["span_id"]
    assert by_name["router"]["parent_span_id"] == by_name["cache"]["span_id"]


def _read_spans(path: Path, trace_id: str, want: int, timeout_s: float = 10) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    spans: list[dict] = []
    while time.monotonic() < deadline:
        if path.exists():
            spans = [s for s in map(json.loads, path.read_text().splitlines()) if s["trace_id"] == trace_id]
            if len(spans) >= want:
                break
        time.sleep(0.2)
    return spans


async def test_malformed_records_go_to_dlq_and_stage_keeps_serving(broker, topics, var_dir: Path) -> None:
    env = service_env(broker.bootstrap, topics, var_dir, SY_MAX_RECORD_BYTES="4096")
    bad_json_schema = json.dumps(
        {
            "request_id": "r-bad-schema",
            "tenant": "acme",
            "kind": "KIND_CHAT",
            "model": "sy-tiny",
            "request": {"messages": "not-a-list"},
        }
    ).encode()
    unknown_field = json.dumps({"request_id": "r-unknown", "tenant": "acme", "modle": "x"}).encode()
    missing_model = chat("r-no-model")
    missing_model.model = ""
    big = chat("r-big", text="x" * 10_000)
    poison = {
        "bad_protobuf": (b"\xff\xff\xff\xff", b"application/x-protobuf"),
        "invalid_json": (b'{"request_id": "r-trunc", "tenant": ', b"application/json"),
        "schema_invalid": (bad_json_schema, b"application/json"),
        "schema_unknown": (unknown_field, b"application/json"),
        "invalid_request": (encode(missing_model), b"application/x-protobuf"),
        "record_too_large": (encode(big), b"application/x-protobuf"),
        "unsupported_content_type": (b"<xml/>", b"text/xml"),
    }
    with services(["preprocess"], env, var_dir):
        for value, ct in poison.values():
            await produce(broker.bootstrap, f"{topics}requests", [value], headers=[("content-type", ct)])
        await produce(broker.bootstrap, f"{topics}requests", [encode(chat("r-good"))])
        dlq = await collect(broker.bootstrap, f"{topics}dlq", len(poison))
        prepared = await collect(broker.bootstrap, f"{topics}prepared", 1)
        replies = await collect(broker.bootstrap, f"{topics}responses", 3)

    assert [decode(r.value).request_id for r in prepared] == ["r-good"]
    letters = [DeadLetter.FromString(r.value) for r in dlq]
    assert len(letters) == len(poison)
    codes = sorted(d.error_code for d in letters)
    expected = sorted(k if k != "schema_unknown" else "schema_invalid" for k in poison)
    assert codes == expected
    originals = {v for v, _ in poison.values()}
    for d in letters:
        assert d.stage == "preprocess"
        assert d.reason, d
        assert d.topic == f"{topics}requests"
        assert d.offset >= 0
        assert d.original_value in originals and not d.truncated
        assert d.original_size == len(d.original_value)
    by_code = {d.error_code: d for d in letters}
    assert "modle" in next(d.reason for d in letters if d.original_value == unknown_field)
    assert "model is required" in by_code["invalid_request"].reason
    assert "SY_MAX_RECORD_BYTES" in by_code["record_too_large"].reason
    # Requesters whose id could be read get an error reply with the same reason.
    # JSON records get JSON error replies (docs/kafka.md); decode_record reads either.
    errs = {decode_record(r).request_id: decode_record(r).error for r in replies}
    for r in replies:
        as_json = header(r.headers, "content-type") == "application/json"
        assert as_json == (decode_record(r).request_id in ("r-bad-schema", "r-unknown")), r.headers
    assert {"r-bad-schema", "r-no-model", "r-big"} <= set(errs)
    assert errs["r-no-model"].code == "invalid_request" and errs["r-no-model"].stage == "preprocess"
    assert errs["r-big"].code == "record_too_large"


async def test_unknown_model_gets_error_reply_from_router(broker, topics, var_dir: Path) -> None:
    env = service_env(broker.bootstrap, topics, var_dir)
    e = chat("r-unknown-model")
    e.model = "gpt-404"
    with services(["router"], env, var_dir):
        await produce(broker.bootstrap, f"{topics}routing", [encode(e)])
        replies = await collect(broker.bootstrap, f"{topics}responses", 1)
    err = decode(replies[0].value).error
    assert err.code == "no_pool" and err.stage == "router" and "gpt-404" in err.message
    assert err.http_status == 404
    assert to_json(decode(replies[0].value))
