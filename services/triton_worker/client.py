"""Calls to Triton Inference Server (tritonclient.grpc.aio), no Kafka here.

`TritonEngine.generate` streams one decoupled text-generation request (the repository's
`sy-tiny` python model: INPUT_IDS + sampling in, TOKEN_IDS/TEXT/FINISH_REASON per step out) and
yields `EngineStep`s for the shared Accumulator, so usage, deltas and TTFT/ITL are computed
exactly as for vLLM. `scrape_metrics` turns Triton's /metrics into collectors of our own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx
import numpy as np
import tritonclient.grpc.aio as grpcclient
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from shared.generation import EngineStep, StepOutput


class TritonError(RuntimeError):
    """Triton answered with an error for this request."""


def _input(name: str, arr: np.ndarray, dtype: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(arr.shape), dtype)
    t.set_data_from_numpy(arr)
    return t


def generation_inputs(prompt_ids: list[int], kw: dict[str, Any]) -> list[grpcclient.InferInput]:
    """Model inputs from the shared sampling kwargs (OpenAI semantics, as for vLLM)."""
    inputs = [
        _input("INPUT_IDS", np.asarray(prompt_ids, dtype=np.int32), "INT32"),
        _input("MAX_TOKENS", np.asarray([kw["max_tokens"]], dtype=np.int32), "INT32"),
        _input("TEMPERATURE", np.asarray([kw["temperature"]], dtype=np.float32), "FP32"),
    ]
    if kw.get("top_p") is not None:
        inputs.append(_input("TOP_P", np.asarray([kw["top_p"]], dtype=np.float32), "FP32"))
    if kw.get("top_k") is not None and kw["top_k"] > 0:
        inputs.append(_input("TOP_K", np.asarray([kw["top_k"]], dtype=np.int32), "INT32"))
    if kw.get("min_tokens"):
        inputs.append(_input("MIN_TOKENS", np.asarray([kw["min_tokens"]], dtype=np.int32), "INT32"))
    if kw.get("seed") is not None:
        inputs.append(_input("SEED", np.asarray([kw["seed"]], dtype=np.int64), "INT64"))
    if kw.get("stop"):
        inputs.append(_input("STOP", np.asarray([s.encode() for s in kw["stop"]], dtype=np.object_), "BYTES"))
    return inputs


# Sampling options the Triton text model does not implement: refused with a clear reason
# rather than silently ignored.
UNSUPPORTED = ("presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs")


def unsupported_options(kw: dict[str, Any]) -> list[str]:
    bad = [k for k in UNSUPPORTED if k in kw]
    if kw.get("n", 1) != 1:
        bad.append("n>1")
    return bad


class TritonEngine:
    def __init__(self, url: str, metrics_url: str, timeout_s: float) -> None:
        self.url = url
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s
        self.client = grpcclient.InferenceServerClient(url)
        self.ready_models: set[str] = set()

    async def refresh(self) -> set[str]:
        """The models the server has READY (heartbeats list them; unready ones are refused)."""
        index = await self.client.get_model_repository_index(as_json=True)
        self.ready_models = {m["name"] for m in index.get("models", []) if m.get("state") == "READY"}
        return self.ready_models

    async def live(self) -> bool:
        try:
            return bool(await self.client.is_server_ready())
        except Exception:  # noqa: BLE001 - unreachable = not ready
            return False

    async def generate(
        self, model: str, prompt_ids: list[int], kw: dict[str, Any], request_id: str
    ) -> AsyncIterator[EngineStep]:
        """One decoupled stream: a step per decode step, the last with its finish reason."""
        done = asyncio.Event()

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": model, "inputs": generation_inputs(prompt_ids, kw), "request_id": request_id}
            await done.wait()  # keep the stream open until the final response came

        first = True
        stream = self.client.stream_infer(requests(), stream_timeout=self.timeout_s)
        try:
            async for result, error in stream:
                if error is not None:
                    raise TritonError(str(error))
                ids = [int(x) for x in result.as_numpy("TOKEN_IDS").reshape(-1)]
                text = result.as_numpy("TEXT").reshape(-1)[0].decode()
                finish = result.as_numpy("FINISH_REASON").reshape(-1)[0].decode()
                step = EngineStep(
                    outputs=[StepOutput(0, ids, text, finish or None)],
                    prompt_token_ids=prompt_ids if first else None,
                )
                if first:
                    step.queue_s = float(result.as_numpy("QUEUE_US").reshape(-1)[0]) / 1e6
                first = False
                yield step
                if finish:
                    return
            raise TritonError("Triton closed the stream before the final response")
        finally:
            done.set()
            stream.cancel()

    async def close(self) -> None:
        await self.client.close()


class ScrapedMetrics(Collector):
    """Triton's own Prometheus families (nv_inference_*), as last scraped, on our /metrics."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterable[Metric]:
        return list(self.families)

    def pending(self) -> int:
        """Requests queued inside Triton (nv_inference_pending_request_count), 0 when not reported."""
        return int(
            sum(
                s.value
                for f in self.families
                if f.name == "nv_inference_pending_request_count"
                for s in f.samples
            )
        )

    async def scrape(self, http: httpx.AsyncClient, url: str) -> None:
        r = await http.get(url)
        r.raise_for_status()
        self.families = [
            _as_scraped(f) for f in text_string_to_metric_families(r.text) if f.name.startswith("nv_")
        ]


def _as_scraped(family: Metric) -> Metric:
    """Re-exposed under Triton's own names: untyped, so no `_total` is appended to its counters."""
    out = Metric(family.name, family.documentation, "unknown")
    for s in family.samples:
        name = s.name[: -len("_total")] if family.type == "counter" and s.name.endswith("_total") else s.name
        out.add_sample(name, s.labels, s.value)
    return out
