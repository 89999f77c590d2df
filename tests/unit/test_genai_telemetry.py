"""The OpenTelemetry GenAI conventions (shared/runtime/genai.py) on the real gateway app and the
shared GenerationWorker: the gateway's request span carries the request's and the reply's gen_ai.*
attributes (usage equal to the reply's), the gen_ai_* histograms have the conventions' names,
labels and buckets, the token usage of one answered request is its prompt + completion tokens, and
a model the gateway refuses never becomes a label. Only the pipeline behind the gateway is stood
in (a backend that answers what is submitted); the whole path is tests/e2e/test_openai_api.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.requests.sqlite_store import SqliteResultStore
from shared.generation.worker import GenerationWorker
from shared.runtime import genai, telemetry
from shared.runtime.config import Settings, load_settings
from shared.runtime.envelope import Envelope, Kind
from tests.helpers.answering import Answering
from tests.unit.test_generation_worker import FakeEngine

AUTH = {"Authorization": "Bearer sk-a"}
CHAT = {
    "model": "sy-tiny",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 4,
    "temperature": 0.5,
    "top_p": 0.25,
    "seed": 7,
}
USAGE = (11, 3)  # prompt, completion tokens of every answer


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The process tracer's spans, kept in memory (the global provider is left alone)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "tracer", lambda: provider.get_tracer("test"))
    return exporter


def client(tmp_path: Path) -> httpx.AsyncClient:
    settings = Settings(var_dir=tmp_path, api_keys={"sk-a": "acme"}, gateway_timeout_s=3)
    pipeline = Answering(text="ok", finish_reason="length", usage=USAGE)
    backend = Backend(
        settings=settings,
        submit=pipeline.submit,
        replies=pipeline.replies,
        store=SqliteResultStore(tmp_path / "results.sqlite"),
        ready=lambda: True,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(create_app(backend)), base_url="http://gw")


def gateway_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "gateway"]
    return span


def usage_sum(model: str, token_type: str, operation: str = "chat") -> float:
    labels = {
        "gen_ai_operation_name": operation,
        "gen_ai_provider_name": "switchyard",
        "gen_ai_request_model": model,
        "gen_ai_response_model": model,
        "gen_ai_token_type": token_type,
    }
    return REGISTRY.get_sample_value("gen_ai_client_token_usage_sum", labels) or 0.0


async def test_the_gateway_span_carries_the_request_and_the_reply(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with client(tmp_path) as http:
        r = await http.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    a = gateway_span(spans).attributes or {}
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "switchyard"
    assert a["gen_ai.request.model"] == "sy-tiny"
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.seed"]) == (4, 7)
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (0.5, 0.25)
    assert a["gen_ai.response.id"] == body["id"]
    assert a["gen_ai.response.model"] == body["model"]
    assert list(a["gen_ai.response.finish_reasons"]) == [c["finish_reason"] for c in body["choices"]]
    assert a["gen_ai.usage.input_tokens"] == body["usage"]["prompt_tokens"]
    assert a["gen_ai.usage.output_tokens"] == body["usage"]["completion_tokens"]
    assert "error.type" not in a and a["switchyard.request_id"] == body["switchyard"]["request_id"]


async def test_a_stream_and_a_text_completion_end_their_span_with_the_reply(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    """A stream's span ends when the stream does, with the usage its last chunk reports."""
    stream = {**CHAT, "stream": True, "stream_options": {"include_usage": True}, "n": 2}
    async with client(tmp_path) as http:
        r = await http.post("/v1/chat/completions", json=stream, headers=AUTH)
        chunks = [line for line in r.text.splitlines() if line.startswith("data: {")]
        a = gateway_span(spans).attributes or {}
        assert f'"usage":{{"prompt_tokens":{a["gen_ai.usage.input_tokens"]}' in chunks[-1]
        assert a["gen_ai.request.choice.count"] == 2
        assert list(a["gen_ai.response.finish_reasons"]) == ["length", "length"]
        spans.clear()
        r = await http.post(
            "/v1/completions", json={"model": "sy-tiny", "prompt": "hi", "max_tokens": 2}, headers=AUTH
        )
    a = gateway_span(spans).attributes or {}
    assert a["gen_ai.operation.name"] == "text_completion" and a["gen_ai.response.id"] == r.json()["id"]
    assert "gen_ai.request.temperature" not in a  # unset: not reported


async def test_token_usage_of_an_answer_and_no_label_for_a_refused_model(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    before = {t: usage_sum("sy-tiny", t) for t in ("input", "output")}
    async with client(tmp_path) as http:
        r = await http.post("/v1/chat/completions", json=CHAT, headers=AUTH)
        refused = await http.post(
            "/v1/chat/completions", json={**CHAT, "model": "made-up-by-a-client"}, headers=AUTH
        )
    usage = r.json()["usage"]
    grew = {t: usage_sum("sy-tiny", t) - before[t] for t in before}
    assert grew == {"input": usage["prompt_tokens"], "output": usage["completion_tokens"]}
    assert sum(grew.values()) == usage["prompt_tokens"] + usage["completion_tokens"]
    assert refused.status_code == 404
    labels = {
        v
        for m in REGISTRY.collect()
        if m.name.startswith("gen_ai")
        for s in m.samples
        for v in s.labels.values()
    }
    assert "made-up-by-a-client" not in labels
    (span,) = [s for s in spans.get_finished_spans() if s.name == "gateway"]  # the refusal opened none


def test_the_histograms_have_the_conventions_names_labels_and_buckets() -> None:
    want = {
        "gen_ai_server_time_to_first_token_seconds": genai.TTFT_BUCKETS,
        "gen_ai_server_time_per_output_token_seconds": genai.TPOT_BUCKETS,
        "gen_ai_server_request_duration_seconds": genai.DURATION_BUCKETS,
        "gen_ai_client_token_usage": genai.TOKEN_BUCKETS,
    }
    assert genai.TTFT_BUCKETS == (
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
    )
    assert genai.TPOT_BUCKETS == (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
    assert genai.DURATION_BUCKETS[0] == 0.01 and genai.DURATION_BUCKETS[-1] == 81.92
    assert genai.TOKEN_BUCKETS == (
        1,
        4,
        16,
        64,
        256,
        1024,
        4096,
        16384,
        65536,
        262144,
        1048576,
        4194304,
        16777216,
        67108864,
    )
    base = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model"]
    for name, buckets in want.items():
        hist: Any = REGISTRY._names_to_collectors[name + "_bucket"]  # noqa: SLF001 - the registered object
        assert list(hist._labelnames) == base + (["gen_ai_token_type"] if "usage" in name else [])  # noqa: SLF001
        assert tuple(hist._upper_bounds[:-1]) == buckets  # noqa: SLF001 - the last is +Inf


def server_count(name: str, model: str = genai.OTHER) -> float:
    labels = dict(
        gen_ai_operation_name="chat",
        gen_ai_provider_name="switchyard",
        gen_ai_request_model=model,
        gen_ai_response_model=model,
    )
    return REGISTRY.get_sample_value(f"{name}_count", labels) or 0.0


async def test_a_worker_observes_the_server_histograms_and_annotates_its_span(tmp_path: Path) -> None:
    """The fake engine answers model "m", which no pool configures: its label is _OTHER."""
    names = [
        "gen_ai_server_time_to_first_token_seconds",
        "gen_ai_server_time_per_output_token_seconds",
        "gen_ai_server_request_duration_seconds",
    ]
    before = [server_count(n) for n in names]
    w = GenerationWorker(load_settings(var_dir=tmp_path), None, FakeEngine())  # type: ignore[arg-type]
    env = Envelope(request_id="r1", tenant="acme", kind=Kind.KIND_CHAT, model="m")
    env.request.sampling.max_tokens = 4
    provider = TracerProvider()
    with provider.get_tracer("t").start_as_current_span("fake_worker") as span:
        (emit,) = await w.handle(env)
    assert [server_count(n) - b for n, b in zip(names, before, strict=True)] == [1, 1, 1]
    a = span.attributes or {}
    resp = emit.envelope.response
    assert (a["gen_ai.request.model"], a["gen_ai.response.model"]) == ("m", "m")
    assert (
        (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"])
        == (3, 2)
        == (
            resp.usage.prompt_tokens,
            resp.usage.completion_tokens,
        )
    )
    assert list(a["gen_ai.response.finish_reasons"]) == ["stop"] and a["gen_ai.response.id"] == "chatcmpl-r1"


def test_labels_name_configured_models_and_the_adapter_version_that_answered() -> None:
    labels = genai.ModelLabels(["sy-tiny"])
    env = Envelope(kind=Kind.KIND_CHAT, model="sy-tiny", adapter="acme-lora")
    env.adapter_ref.name, env.adapter_ref.version = "acme-lora", 3
    assert labels.of(env) == ("chat", "switchyard", "sy-tiny", "acme-lora@3")
    assert genai.response_attributes(env)["gen_ai.response.model"] == "acme-lora@3"
    assert genai.request_attributes(env)["gen_ai.request.model"] == "acme-lora"
    assert labels.of(Envelope(kind=Kind.KIND_COMPLETION, model="free text")) == (
        "text_completion",
        "switchyard",
        genai.OTHER,
        genai.OTHER,
    )
    rollout = Envelope(kind=Kind.KIND_ROLLOUT, model="sy-tiny")
    rollout.request.prompt = "2+2="
    assert genai.operation(rollout) == "text_completion"
