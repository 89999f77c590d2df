"""Logs, traces, metrics and envelope timings: the cross-cutting observability of every stage.

- Logs: structlog JSON on stderr; `request_id`, `tenant`, `trace_id` are bound per asyncio task
  (contextvars), so every line a stage writes while handling a record carries them.
- Traces: one OpenTelemetry span per stage and record. Context crosses Kafka hops as W3C
  `traceparent` in the record headers. Export is off unless OTEL_EXPORTER_OTLP_ENDPOINT is set;
  SY_TRACE_FILE adds a local JSONL sink.
- Metrics: Prometheus collectors shared by all stages, served on `/metrics` by shared.runtime.health.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
from prometheus_client import Counter, Gauge, Histogram
from switchyard.v1.envelope_pb2 import Envelope, Timing

# --------------------------------------------------------------------------- logging


# Log fields that may carry what users wrote; with redaction on they keep only their size.
PROMPT_FIELDS = frozenset({"prompt", "prompts", "content", "messages", "text", "completion", "body", "input"})
# Log fields that must never carry a credential, whatever the setting.
SECRET_FIELDS = frozenset({"authorization", "api_key", "key", "token", "password", "secret"})


def redact(redact_prompts: bool) -> Any:
    """A structlog processor: secrets always masked, prompt-like fields replaced by their size."""

    def processor(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
        for k in list(event):
            lk = k.lower()
            if lk in SECRET_FIELDS:
                event[k] = "[secret]"
            elif redact_prompts and lk in PROMPT_FIELDS:
                event[k] = f"[redacted {len(str(event[k]))} chars]"
        return event

    return processor


def configure_logging(
    service: str, level: str = "INFO", fmt: str = "json", redact_prompts: bool = False
) -> None:
    """JSON for structlog and stdlib records alike (aiokafka, uvicorn), one line each."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        redact(redact_prompts),
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("aiokafka", "kafka", "uvicorn.access", "httpx", "httpcore"):  # a line per call
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service)


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)


def bind_request(env: Envelope, trace_id: str = "") -> None:
    """Bind the ids of the record being handled to this task's log context."""
    structlog.contextvars.bind_contextvars(request_id=env.request_id, tenant=env.tenant, trace_id=trace_id)


# --------------------------------------------------------------------------- tracing


class JsonlSpanExporter(SpanExporter):
    """Append finished spans as JSON lines: a local trace sink for `make run` without a collector."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in shutdown()
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for s in spans:
            ctx = s.get_span_context()
            lines.append(
                json.dumps(
                    {
                        "name": s.name,
                        "trace_id": format(ctx.trace_id, "032x"),
                        "span_id": format(ctx.span_id, "016x"),
                        "parent_span_id": format(s.parent.span_id, "016x") if s.parent else None,
                        "start_ns": s.start_time,
                        "end_ns": s.end_time,
                        "service": s.resource.attributes.get("service.name"),
                        "attributes": dict(s.attributes or {}),
                        "links": [format(link.context.trace_id, "032x") for link in s.links],
                        "status": s.status.status_code.name,
                    },
                    default=str,
                )
            )
        with self._lock:
            self._f.write("\n".join(lines) + "\n")
            self._f.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._f.close()


_provider: TracerProvider | None = None


def configure_tracing(service: str, trace_file: Path | None = None, sample_ratio: float = 1.0) -> None:
    """Install the tracer provider once per process; exporters only where configured."""
    global _provider
    if _provider is not None:
        return
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"switchyard-{service}"}),
        sampler=ParentBasedTraceIdRatio(sample_ratio),
    )
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if trace_file is not None:
        provider.add_span_processor(
            BatchSpanProcessor(JsonlSpanExporter(trace_file), schedule_delay_millis=200)
        )
    trace.set_tracer_provider(provider)
    _provider = provider


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.shutdown()


def tracer() -> trace.Tracer:
    return trace.get_tracer("switchyard")


Headers = list[tuple[str, bytes]]


class _HeaderSetter:
    def set(self, carrier: Headers, key: str, value: str) -> None:
        carrier[:] = [(k, v) for k, v in carrier if k != key]
        carrier.append((key, value.encode()))


class _HeaderGetter:
    def get(self, carrier: Headers, key: str) -> list[str] | None:
        vals = [v.decode("latin-1") for k, v in carrier if k == key and v is not None]
        return vals or None

    def keys(self, carrier: Headers) -> list[str]:
        return [k for k, _ in carrier]


def inject_headers(headers: Headers, ctx: otel_context.Context | None = None) -> Headers:
    """Write the current (or given) trace context into Kafka record headers."""
    propagate.inject(headers, context=ctx, setter=_HeaderSetter())
    return headers


def extract_context(headers: Sequence[tuple[str, bytes]] | None) -> otel_context.Context:
    return propagate.extract(list(headers or []), getter=_HeaderGetter())


@contextmanager
def record_span(
    stage: str,
    headers: Sequence[tuple[str, bytes]] | None,
    topic: str,
    partition: int,
    offset: int,
    request_id: str,
    tenant: str,
    via: trace.Tracer | None = None,
) -> Iterator[trace.Span]:
    """A stage's span for one Kafka record, child of the producer's span (`traceparent` header).

    `via`: another tracer than the process's (the profile-overhead bench measures this exact span).
    """
    with (via or tracer()).start_as_current_span(
        stage,
        context=extract_context(headers),
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": "kafka",
            "messaging.destination.name": topic,
            "messaging.kafka.partition": partition,
            "messaging.kafka.offset": offset,
            "switchyard.request_id": request_id,
            "switchyard.tenant": tenant,
        },
    ) as span:
        yield span


@contextmanager
def request_span(
    name: str, http_headers: Any, start_ns: int, end_on_exit: bool = True, **attributes: str
) -> Iterator[trace.Span]:
    """The root of a request's trace, at the edge that accepted it (`end_on_exit=False`: the
    caller ends it, at the reply: shared/runtime/genai.py GenAiCall).

    Continues the caller's trace when the HTTP request carries a W3C `traceparent`, and keeps its
    sampled flag (the sampler is parent-based): a client that traces its own calls sees ours
    beneath them, and one that sends `-00` turns tracing off for that request end to end.
    """
    parent = propagate.extract(http_headers)
    with tracer().start_as_current_span(
        name,
        context=parent,
        kind=trace.SpanKind.SERVER,
        start_time=start_ns,
        attributes={f"switchyard.{k}": v for k, v in attributes.items()},
        end_on_exit=end_on_exit,
    ) as span:
        yield span


def current_trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def trace_id_of(headers: Sequence[tuple[str, bytes]] | None) -> str:
    """The trace id a record's `traceparent` header names ('' when none)."""
    for k, v in headers or []:
        if k == "traceparent" and v:
            parts = v.decode("latin-1").split("-")
            if len(parts) >= 2:
                return parts[1]
    return ""


# --------------------------------------------------------------------------- timings


def add_timing(env: Envelope, stage: str, start_ns: int, end_ns: int, **attrs: object) -> Timing:
    """Append one stage's (or hop's) span of wall-clock time to the envelope."""
    t = env.timings.add(stage=stage, start_ns=start_ns, end_ns=end_ns)
    for k, v in attrs.items():
        t.attrs[k] = str(v)
    return t


@contextmanager
def timed(env: Envelope, stage: str, **attrs: object) -> Iterator[dict[str, object]]:
    """Time a block into `env.timings`; the yielded dict adds attributes on the way out."""
    extra: dict[str, object] = dict(attrs)
    start = time.time_ns()
    try:
        yield extra
    finally:
        add_timing(env, stage, start, time.time_ns(), **extra)


def breakdown(env: Envelope) -> list[dict[str, object]]:
    """Timings as plain dicts in milliseconds, ordered by start (for replies and reports)."""
    rows = []
    for t in sorted(env.timings, key=lambda t: (t.start_ns, t.end_ns)):
        rows.append(
            {
                "stage": t.stage,
                "start_ns": t.start_ns,
                "duration_ms": round((t.end_ns - t.start_ns) / 1e6, 3),
                **dict(t.attrs),
            }
        )
    return rows


# --------------------------------------------------------------------------- metrics

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

STAGE_SECONDS = Histogram(
    "sy_stage_seconds",
    "Time a stage spends on one record (handler and output acks)",
    ["stage"],
    buckets=_BUCKETS,
)
QUEUE_WAIT_SECONDS = Histogram(
    "sy_queue_wait_seconds", "Produce-to-consume time of one Kafka hop", ["stage", "topic"], buckets=_BUCKETS
)
RECORDS = Counter("sy_records_total", "Records handled by a stage, by outcome", ["stage", "outcome"])
ERRORS = Counter("sy_errors_total", "Stage errors by code", ["stage", "code"])
IN_FLIGHT = Gauge("sy_in_flight", "Records being handled now", ["stage"])
DEPENDENCY_WAITS = Counter(
    "sy_dependency_waits_total",
    "Handler attempts that found a dependency down and waited",
    ["stage", "dependency"],
)
DEAD_LETTERS = Counter("sy_dead_letters_total", "Records dead-lettered, by reason code", ["stage", "code"])
STALLED = Gauge("sy_stage_stalled", "1 while records wait and none finished for SY_STALL_AFTER_S", ["stage"])
CONSUMER_LAG = Gauge(
    "sy_consumer_lag",
    "High watermark minus position, per assigned partition",
    ["stage", "topic", "partition"],
)
PRODUCED = Counter("sy_produced_total", "Records produced, by topic", ["topic"])


class GpuCollector:
    """GPU utilisation, memory and power per device through NVML, where a GPU and driver exist.

    Registered by every service process (shared/runtime/service.py); on a machine without NVML it reports
    nothing (and says so once in the log), so the same /metrics code runs on CPU pools.
    """

    def __init__(self) -> None:
        self.handles: list[tuple[str, object]] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [
                (str(i), pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())
            ]
        except Exception as exc:  # noqa: BLE001 - no driver, no GPU, no package: no GPU series
            get_logger(__name__).info("no GPU metrics", reason=type(exc).__name__)

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import GaugeMetricFamily

        if not self.handles:
            return
        util = GaugeMetricFamily("sy_gpu_utilization_ratio", "GPU busy share (NVML)", labels=["gpu"])
        used = GaugeMetricFamily("sy_gpu_memory_used_bytes", "GPU memory in use (NVML)", labels=["gpu"])
        total = GaugeMetricFamily("sy_gpu_memory_total_bytes", "GPU memory (NVML)", labels=["gpu"])
        power = GaugeMetricFamily("sy_gpu_power_watts", "GPU power draw (NVML)", labels=["gpu"])
        n = self.nvml
        for idx, h in self.handles:
            try:
                util.add_metric([idx], n.nvmlDeviceGetUtilizationRates(h).gpu / 100.0)
                mem = n.nvmlDeviceGetMemoryInfo(h)
                used.add_metric([idx], float(mem.used))
                total.add_metric([idx], float(mem.total))
                power.add_metric([idx], n.nvmlDeviceGetPowerUsage(h) / 1000.0)
            except Exception:  # noqa: BLE001, S112 - a device that stops answering is skipped
                continue
        yield from (util, used, total, power)


_gpu_registered = False


def register_gpu_metrics() -> None:
    global _gpu_registered
    if not _gpu_registered:
        from prometheus_client import REGISTRY

        REGISTRY.register(GpuCollector())
        _gpu_registered = True
