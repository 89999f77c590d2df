"""The OpenTelemetry GenAI semantic conventions: `gen_ai.*` span attributes and metrics.

Standard GenAI dashboards read these names. Spans: the gateway's request span (GenAiCall, open
until the reply) and each worker's stage span carry the request's and the response's attributes.
Metrics, in the names an OTel-to-Prometheus pipeline gives them (dots to underscores, unit suffix):
the workers observe the server histograms (time to first token, time per output token, request
duration) where the engine is; the gateway observes `gen_ai.client.token.usage`, each answered
request's usage as the client is billed it. Buckets are the conventions' advisory boundaries.

Label values are bounded: the model label is a configured model (SY_POOLS) or `_OTHER`, the
response model an adapter version the registry resolved; no client text becomes a label.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from prometheus_client import Histogram

from shared.runtime.envelope import Envelope, Kind

PROVIDER = "switchyard"  # gen_ai.provider.name: no well-known value fits a self-hosted platform
OTHER = "_OTHER"  # a model outside the configuration (a record from a Kafka producer, say)

OPERATIONS = {
    Kind.KIND_CHAT: "chat",
    Kind.KIND_COMPLETION: "text_completion",
    Kind.KIND_EMBEDDING: "embeddings",
}

SERVER_LABELS = [
    "gen_ai_operation_name",
    "gen_ai_provider_name",
    "gen_ai_request_model",
    "gen_ai_response_model",
]
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))  # 1, 4, 16, ... 67108864

TIME_TO_FIRST_TOKEN = Histogram(
    "gen_ai_server_time_to_first_token_seconds",
    "gen_ai.server.time_to_first_token: from the worker taking the request to its first token",
    SERVER_LABELS,
    buckets=TTFT_BUCKETS,
)
TIME_PER_OUTPUT_TOKEN = Histogram(
    "gen_ai_server_time_per_output_token_seconds",
    "gen_ai.server.time_per_output_token: decode time per token after the first (first choice)",
    SERVER_LABELS,
    buckets=TPOT_BUCKETS,
)
REQUEST_DURATION = Histogram(
    "gen_ai_server_request_duration_seconds",
    "gen_ai.server.request.duration: from the worker taking the request to its final response",
    SERVER_LABELS,
    buckets=DURATION_BUCKETS,
)
TOKEN_USAGE = Histogram(
    "gen_ai_client_token_usage",
    "gen_ai.client.token.usage: input and output tokens of each answered request ({token})",
    [*SERVER_LABELS, "gen_ai_token_type"],
    buckets=TOKEN_BUCKETS,
)


def operation(env: Envelope) -> str:
    """chat / text_completion / embeddings; a rollout by the shape of its request."""
    op = OPERATIONS.get(env.kind)
    if op is None:
        op = "chat" if env.request.messages else "text_completion"
    return op


def response_model(env: Envelope) -> str:
    """The adapter version that answered (`name@version`, as replies report it), else the model."""
    ref = env.adapter_ref
    return f"{ref.name}@{ref.version}" if ref.name else env.model


def response_id(env: Envelope) -> str:
    """The reply's `id` (shared/openai/format.py response_body)."""
    return f"{'cmpl' if env.kind == Kind.KIND_COMPLETION else 'chatcmpl'}-{env.request_id}"


def request_attributes(env: Envelope) -> dict[str, Any]:
    """The request's gen_ai.* attributes; sampling fields only where the request set them."""
    s = env.request.sampling
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": operation(env),
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.system": PROVIDER,  # the older name of gen_ai.provider.name
        "gen_ai.request.model": env.adapter or env.model,  # the name the reply goes under
    }
    if s.HasField("max_tokens"):
        attrs["gen_ai.request.max_tokens"] = s.max_tokens
    if s.HasField("temperature"):
        attrs["gen_ai.request.temperature"] = s.temperature
    if s.HasField("top_p"):
        attrs["gen_ai.request.top_p"] = s.top_p
    if s.HasField("seed"):
        attrs["gen_ai.request.seed"] = s.seed
    if s.HasField("n") and s.n != 1:
        attrs["gen_ai.request.choice.count"] = s.n
    return attrs


def response_attributes(env: Envelope) -> dict[str, Any]:
    r = env.response
    return {
        "gen_ai.response.id": response_id(env),
        "gen_ai.response.model": response_model(env),
        "gen_ai.response.finish_reasons": [c.finish_reason or "stop" for c in r.choices],
        "gen_ai.usage.input_tokens": r.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": r.usage.completion_tokens,
    }


class ModelLabels:
    """Metric labels of an envelope, bounded by the configured models; each label set's series
    are looked up once (a `labels()` call costs more than the observation)."""

    def __init__(self, models: Iterable[str]) -> None:
        self.known = frozenset(models)
        self.usage: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self.server: dict[tuple[str, ...], tuple[Any, Any, Any]] = {}

    def of(self, env: Envelope) -> tuple[str, str, str, str]:
        if env.model in self.known:
            return operation(env), PROVIDER, env.model, response_model(env)
        return operation(env), PROVIDER, OTHER, OTHER

    def observe_usage(self, env: Envelope) -> None:
        """gen_ai.client.token.usage of one answered request."""
        labels, usage = self.of(env), env.response.usage
        series = self.usage.get(labels)
        if series is None:
            series = self.usage[labels] = (
                TOKEN_USAGE.labels(*labels, "input"),
                TOKEN_USAGE.labels(*labels, "output"),
            )
        series[0].observe(usage.prompt_tokens)
        series[1].observe(usage.completion_tokens)

    def observe_server(
        self, env: Envelope, start_ns: int, first_ns: int, end_ns: int, times: Sequence[int]
    ) -> None:
        """A worker's generation, taken at `start_ns`, its first token at `first_ns` (0: none),
        answered at `end_ns`; `times`: the first choice's token times (one sequence's decode)."""
        labels = self.of(env)
        series = self.server.get(labels)
        if series is None:
            series = self.server[labels] = tuple(  # type: ignore[assignment]
                h.labels(*labels) for h in (TIME_TO_FIRST_TOKEN, TIME_PER_OUTPUT_TOKEN, REQUEST_DURATION)
            )
        ttft, tpot, duration = series
        if first_ns:
            ttft.observe((first_ns - start_ns) / 1e9)
        if len(times) > 1:
            tpot.observe((times[-1] - times[0]) / 1e9 / (len(times) - 1))
        duration.observe((end_ns - start_ns) / 1e9)


def annotate(span: trace.Span, env: Envelope) -> None:
    """A worker's span: the request's and the response's attributes (nothing if not recorded)."""
    if span.is_recording():
        span.set_attributes({**request_attributes(env), **response_attributes(env)})


class GenAiCall:
    """The gateway's request span, open until the reply is sent or the stream ends.

    `start` gives it the request's attributes; `answered` the response's (and observes the token
    usage); `end` ends it once, with `error.type` when the request failed.
    """

    __slots__ = ("ended", "env", "labels", "span")

    def __init__(self, env: Envelope, labels: ModelLabels) -> None:
        self.env, self.labels = env, labels
        self.span: trace.Span | None = None
        self.ended = False

    def start(self, span: trace.Span) -> None:
        self.span = span
        if span.is_recording():
            span.set_attributes(request_attributes(self.env))

    def answered(self, final: Envelope) -> None:
        self.labels.observe_usage(final)
        if self.span is not None and self.span.is_recording():
            self.span.set_attributes(response_attributes(final))

    def end(self, exc: BaseException | None = None, error: str = "") -> None:
        span = self.span
        if span is None or self.ended:
            return
        self.ended = True
        if exc is not None:
            error = str(getattr(exc, "code", "") or type(exc).__qualname__)
            if getattr(exc, "status", 500) >= 500:  # a refusal (4xx) is not the server's error
                span.set_status(Status(StatusCode.ERROR, error))
        if error:
            span.set_attribute("error.type", error)
        span.end()

    def end_after(self, final: asyncio.Future[Envelope]) -> None:
        """A stream's end, however it ended: an error reply's code, `_OTHER` if none came."""
        if not final.done() or final.cancelled() or final.exception() is not None:
            self.end(error=OTHER)
        else:
            self.end(error=final.result().error.code)
