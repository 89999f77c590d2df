"""The shared GenerationWorker with a fake engine: refusals, a generated reply, heartbeats; and
both real engines provide everything the GenerationEngine protocol names."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from switchyard.v1.events_pb2 import Heartbeat

from shared.generation.engine import EngineLoad, GenerationEngine, Job
from shared.generation.engine_io import EngineStep, StepOutput
from shared.generation.worker import GenerationWorker
from shared.runtime.config import load_settings
from shared.runtime.envelope import Envelope, ErrorCode, Kind, Rejected


class FakeEngine:
    stage, engine, pool, max_in_flight, health_check = "fake_worker", "fake", "edge", 4, "fake"

    def __init__(self) -> None:
        self.released = 0
        self.attempts: list[str] = []
        self.ready = True

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def prepare(self, env: Envelope) -> Job:
        if env.adapter:
            raise Rejected(ErrorCode.NO_POOL, "no adapters here", 404)
        return Job({"n": 1}, inputs="hi", release=self.release)

    def release(self) -> None:
        self.released += 1

    async def generate(self, env: Envelope, job: Job, attempt: str) -> AsyncIterator[Any]:
        self.attempts.append(attempt)
        yield EngineStep([StepOutput(0, [1], job.inputs)], prompt_token_ids=[7, 8, 9])
        yield EngineStep([StepOutput(0, [2], "!", "stop")])

    def model_version(self, model: str) -> str:
        return f"v-{model}"

    def load(self) -> EngineLoad:
        return EngineLoad(models=["m"], model_versions={"m": "v-m"}, queue_depth=3, modalities=["text"])

    async def refresh(self) -> None: ...

    def background(self) -> list[Any]:
        return []

    def app(self) -> None:
        return None


def worker(tmp_path: Path) -> tuple[GenerationWorker, FakeEngine]:
    eng = FakeEngine()
    return GenerationWorker(load_settings(var_dir=tmp_path), None, eng), eng  # type: ignore[arg-type]


def envelope(**kw: Any) -> Envelope:
    env = Envelope(request_id="r1", tenant="acme", kind=Kind.KIND_CHAT, model="m", **kw)
    env.request.sampling.max_tokens = 4
    return env


async def test_a_generation_is_answered_with_usage_version_and_timings(tmp_path: Path) -> None:
    w, eng = worker(tmp_path)
    (emit,) = await w.handle(envelope())
    resp = emit.envelope.response
    assert emit.topic == w.responses and not emit.envelope.HasField("error")
    assert (resp.choices[0].text, resp.choices[0].finish_reason) == ("hi!", "stop")
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (3, 2)
    assert (resp.pool, resp.model_version) == ("edge", "v-m")
    assert {t.stage for t in emit.envelope.timings} >= {"ttft", "decode"}
    assert eng.released == 1 and w.in_flight == 0 and eng.attempts[0].startswith("acme/r1:")


async def test_refusals_are_error_replies_from_the_engines_stage(tmp_path: Path) -> None:
    w, eng = worker(tmp_path)
    (late,) = await w.handle(envelope(deadline_unix_ms=int(time.time() * 1000) - 1000))
    assert (late.envelope.error.code, late.envelope.error.http_status) == (ErrorCode.DEADLINE_EXCEEDED, 504)
    (adapter,) = await w.handle(envelope(adapter="a"))
    err = adapter.envelope.error
    assert (err.code, err.stage, err.http_status) == (ErrorCode.NO_POOL, "fake_worker", 404)
    assert eng.attempts == [] and eng.released == 0


def test_heartbeat_is_the_engines_load_with_the_workers_own_state(tmp_path: Path) -> None:
    w, _ = worker(tmp_path)
    part = SimpleNamespace(topic=w.source, partition=2)
    w.consumer = SimpleNamespace(consumer=SimpleNamespace(assignment=lambda: [part]))  # type: ignore[assignment]
    w.in_flight = 1
    hb = w.heartbeat()
    assert isinstance(hb, Heartbeat)
    assert (hb.pool, hb.engine, hb.in_flight, hb.max_in_flight, hb.queue_depth) == ("edge", "fake", 1, 4, 3)
    assert list(hb.partitions) == [2] and dict(hb.model_versions) == {"m": "v-m"}


def _members(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))


@pytest.mark.parametrize(
    "path",
    ["services.vllm_worker.generation:VllmGeneration", "services.triton_worker.generation:TritonGeneration"],
)
def test_both_engines_provide_the_protocol(path: str) -> None:
    import importlib

    module, name = path.split(":")
    cls = getattr(importlib.import_module(module), name)
    wanted = _members(GenerationEngine) - {"register"}
    init = inspect.getsource(cls.__init__)
    missing = {m for m in wanted if not hasattr(cls, m) and f"self.{m} =" not in init}
    assert not missing
    for m in ("start", "stop", "prepare", "refresh"):
        assert asyncio.iscoroutinefunction(getattr(cls, m)), m
    assert inspect.isasyncgenfunction(cls.generate)


def test_profile_api_documents_a_response_for_every_route(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from services.vllm_worker.api import profile_api

    spec = TestClient(profile_api(load_settings(var_dir=tmp_path), object())).get("/openapi.json").json()  # type: ignore[arg-type]
    ops = [op for p, item in spec["paths"].items() if p.startswith("/v1/") for op in item.values()]
    assert len(ops) == 2
    for op in ops:
        assert op["responses"]["200"]["content"]["application/json"]["schema"]
        assert op["responses"]["409"]["content"]["application/json"]["schema"]
