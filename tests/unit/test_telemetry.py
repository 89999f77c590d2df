from __future__ import annotations

import json
import logging

import structlog
from opentelemetry.sdk.trace import TracerProvider

from shared.runtime.envelope import Envelope
from shared.runtime.telemetry import (
    add_timing,
    bind_request,
    breakdown,
    configure_logging,
    extract_context,
    get_logger,
    inject_headers,
    timed,
    trace_id_of,
)


def test_timed_appends_entry_with_attrs() -> None:
    e = Envelope(request_id="r")
    with timed(e, "router", pool="vllm") as extra:
        extra["decision"] = "cheapest"
    (t,) = e.timings
    assert t.stage == "router" and t.end_ns >= t.start_ns > 0
    assert dict(t.attrs) == {"pool": "vllm", "decision": "cheapest"}


def test_breakdown_orders_by_start_and_reports_ms() -> None:
    e = Envelope()
    add_timing(e, "b", 3_000_000, 5_000_000)
    add_timing(e, "a", 1_000_000, 2_500_000, topic="x")
    rows = breakdown(e)
    assert [r["stage"] for r in rows] == ["a", "b"]
    assert rows[0]["duration_ms"] == 1.5 and rows[0]["topic"] == "x"


def test_trace_context_round_trips_through_headers() -> None:
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("producer") as span:
        headers = inject_headers([("content-type", b"x")])
        want = format(span.get_span_context().trace_id, "032x")
    assert trace_id_of(headers) == want
    assert [k for k, _ in headers] == ["content-type", "traceparent"]
    ctx = extract_context(headers)
    with tracer.start_as_current_span("consumer", context=ctx) as child:
        assert format(child.get_span_context().trace_id, "032x") == want
        assert child.parent.span_id == span.get_span_context().span_id
    # injecting twice replaces, never repeats, the header
    inject_headers(headers)
    assert sum(1 for k, _ in headers if k == "traceparent") <= 1


def test_logs_are_json_with_request_ids_bound(capsys) -> None:
    configure_logging("test", "INFO", "json")
    bind_request(Envelope(request_id="r-9", tenant="acme"), trace_id="abc")
    get_logger("x").info("hello", n=1)
    logging.getLogger("aiokafka").warning("stdlib line")
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert lines[0]["event"] == "hello" and lines[0]["request_id"] == "r-9"
    assert lines[0]["tenant"] == "acme" and lines[0]["trace_id"] == "abc" and lines[0]["service"] == "test"
    assert lines[1]["event"] == "stdlib line" and lines[1]["request_id"] == "r-9"
    structlog.contextvars.clear_contextvars()


def test_gpu_collector_reports_nvml_devices_and_nothing_without_them() -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest

    from shared.runtime.telemetry import GpuCollector

    cpu_only = GpuCollector()  # this machine: no NVML driver
    assert list(cpu_only.collect()) == []
    # No GPU here: NVML's answers are stood in by an object with its API (values as a driver gives them).
    gpu = GpuCollector()
    gpu.nvml = SimpleNamespace(
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=75),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=2 * 1024**3, total=80 * 1024**3),
        nvmlDeviceGetPowerUsage=lambda h: 350_000,  # milliwatts
    )
    gpu.handles = [("0", object())]
    reg = CollectorRegistry()
    reg.register(gpu)
    from prometheus_client.parser import text_string_to_metric_families

    got = {
        s.name: s.value
        for f in text_string_to_metric_families(generate_latest(reg).decode())
        for s in f.samples
        if s.labels == {"gpu": "0"}
    }
    assert got == {
        "sy_gpu_utilization_ratio": 0.75,
        "sy_gpu_memory_used_bytes": 2 * 1024**3,
        "sy_gpu_memory_total_bytes": 80 * 1024**3,
        "sy_gpu_power_watts": 350.0,
    }


def test_logs_redact_prompts_when_configured_and_never_show_secrets(capsys) -> None:  # type: ignore[no-untyped-def]
    import json as _json

    from shared.runtime.telemetry import configure_logging, get_logger

    for redact_prompts in (False, True):
        configure_logging("t", "INFO", "json", redact_prompts)
        get_logger("t").info("req", content="my card is 4111", authorization="Bearer sk-live", n=3)
        line = _json.loads(capsys.readouterr().err.strip().splitlines()[-1])
        assert line["authorization"] == "[secret]" and line["n"] == 3
        assert line["content"] == ("[redacted 15 chars]" if redact_prompts else "my card is 4111")
    configure_logging("t", "INFO", "json", False)
