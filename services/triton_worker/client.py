"""Calls to Triton Inference Server (tritonclient.grpc.aio), no Kafka here.

`TritonEngine.generate` streams one decoupled text-generation request (the repository's
`sy-tiny` python model: INPUT_IDS + sampling in, TOKEN_IDS/TEXT/FINISH_REASON per step out) and
yields `EngineStep`s for the shared Accumulator, so usage, deltas and TTFT/ITL are computed
exactly as for vLLM. `scrape_metrics` turns Triton's /metrics into collectors of our own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx
import numpy as np
import tritonclient.grpc.aio as grpcclient
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from shared.generation.engine_io import EngineStep, Logprob, StepOutput
from shared.runtime.envelope import DependencyUnavailable
from shared.runtime.outages import TRITON, triton_down

from .media import MediaInputs


class TritonError(RuntimeError):
    """Triton answered with an error for this request."""


def triton_unavailable(exc: BaseException, what: str) -> DependencyUnavailable | None:
    """DependencyUnavailable for an error that means Triton is down (gRPC UNAVAILABLE: refused,
    shutting down, model reloading), else None: the request's own errors stay TritonError/the
    library's, retried and then dead-lettered (shared/runtime/outages.py says why a deadline is one)."""
    if triton_down(exc):
        return DependencyUnavailable(TRITON, f"{what}: {type(exc).__name__}: {exc}"[:500])
    return None


def _input(name: str, arr: np.ndarray, dtype: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(arr.shape), dtype)
    t.set_data_from_numpy(arr)
    return t


def generation_inputs(
    prompt_ids: list[int], kw: dict[str, Any], media: MediaInputs | None = None
) -> list[grpcclient.InferInput]:
    """Model inputs from the shared sampling kwargs (OpenAI semantics, as for vLLM); `media`:
    a multimodal model's extra inputs (media.media_inputs: pixels, audio samples, offsets)."""
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
    if kw.get("logprobs") is not None:
        inputs.append(_input("LOGPROBS", np.asarray([kw["logprobs"]], dtype=np.int32), "INT32"))
    for name, arr, dtype in media or []:
        inputs.append(_input(name, np.ascontiguousarray(arr), dtype))
    return inputs


# Sampling options the Triton text model does not implement: refused with a clear reason
# rather than silently ignored; the penalties whenever set (as before), vLLM's extra options
# unless set to the value the model behaves as anyway (vLLM's default: `skip_special_tokens:
# true` is what Triton's detokenizer does, `ignore_eos: false` what its decode loop does).
UNSUPPORTED = ("presence_penalty", "frequency_penalty", "repetition_penalty")
UNSUPPORTED_UNLESS_DEFAULT: dict[str, Any] = {
    "min_p": 0.0,
    "ignore_eos": False,
    "stop_token_ids": [],
    "include_stop_str_in_output": False,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "logit_bias": {},
    "allowed_token_ids": [],
    "bad_words": [],
}


def unsupported_options(kw: dict[str, Any]) -> list[str]:
    bad = [k for k in UNSUPPORTED if k in kw]
    return bad + [k for k, neutral in UNSUPPORTED_UNLESS_DEFAULT.items() if k in kw and kw[k] != neutral]


def choice_kwargs(kw: dict[str, Any], index: int) -> dict[str, Any]:
    """Sampling for choice `index` of n: its own seed (seed + index), so sampled choices differ
    and a redelivered request regenerates each one the same; greedy choices are all the same,
    as with vLLM's n."""
    if index == 0 or kw.get("seed") is None:
        return kw
    return {**kw, "seed": (int(kw["seed"]) + index) % 2**63}


def step_logprobs(
    result: Any, ids: list[int], token_text: Callable[[int], str]
) -> list[dict[int, Logprob]] | None:
    """The model's LOGPROBS/TOP_IDS/TOP_LOGPROBS outputs as vLLM-shaped per-token dicts."""
    lps = result.as_numpy("LOGPROBS")
    if lps is None or not ids:
        return None
    top_ids, top_lps = result.as_numpy("TOP_IDS"), result.as_numpy("TOP_LOGPROBS")
    out = []
    for j, tok in enumerate(ids):
        d: dict[int, Logprob] = {}
        if top_ids is not None and top_ids.size:
            for rank, (t, lp) in enumerate(zip(top_ids[j], top_lps[j], strict=True), start=1):
                d[int(t)] = Logprob(float(lp), rank, token_text(int(t)))
        if tok not in d:
            d[tok] = Logprob(float(lps[j]), None, token_text(tok))
        out.append(d)
    return out


class TritonEngine:
    def __init__(self, url: str, metrics_url: str, timeout_s: float) -> None:
        self.url = url
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s
        self.client = grpcclient.InferenceServerClient(url)
        self.ready_models: set[str] = set()

    async def refresh(self) -> set[str]:
        """The models the server has READY (heartbeats list them; unready ones are refused)."""
        try:
            index = await self.client.get_model_repository_index(as_json=True)
        except Exception as exc:
            if (down := triton_unavailable(exc, f"repository index at {self.url}")) is not None:
                raise down from exc
            raise
        self.ready_models = {m["name"] for m in index.get("models", []) if m.get("state") == "READY"}
        return self.ready_models

    async def live(self) -> bool:
        try:
            return bool(await self.client.is_server_ready())
        except Exception:  # noqa: BLE001 - unreachable = not ready
            return False

    async def generate(
        self,
        model: str,
        prompt_ids: list[int],
        kw: dict[str, Any],
        request_id: str,
        token_text: Callable[[int], str] = str,
        media: MediaInputs | None = None,
    ) -> AsyncIterator[EngineStep]:
        """The request's n choices as one sequence of steps (StepOutput.index = choice).

        Each choice is its own decoupled stream, sent at once, so the model's continuous
        batching runs them together; `token_text` names tokens in logprobs."""
        n = int(kw.get("n", 1))
        if n == 1:
            async for step in self._stream(model, prompt_ids, kw, request_id, 0, token_text, media):
                yield step
            return
        queue: asyncio.Queue[EngineStep | BaseException | None] = asyncio.Queue()

        async def pump(i: int) -> None:
            try:
                async for step in self._stream(
                    model, prompt_ids, choice_kwargs(kw, i), f"{request_id}/{i}", i, token_text, media
                ):
                    await queue.put(step)
                await queue.put(None)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the reader
                await queue.put(exc)

        tasks = [asyncio.create_task(pump(i)) for i in range(n)]
        try:
            first, done = True, 0
            while done < n:
                item = await queue.get()
                if item is None:
                    done += 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                if first:
                    first = False
                elif item.prompt_token_ids is not None:
                    item.prompt_token_ids, item.queue_s = None, None
                yield item
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _stream(
        self,
        model: str,
        prompt_ids: list[int],
        kw: dict[str, Any],
        request_id: str,
        index: int,
        token_text: Callable[[int], str],
        media: MediaInputs | None = None,
    ) -> AsyncIterator[EngineStep]:
        """One decoupled stream: a step per decode step, the last with its finish reason."""
        done = asyncio.Event()

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {
                "model_name": model,
                "inputs": generation_inputs(prompt_ids, kw, media),
                "request_id": request_id,
            }
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
                out = StepOutput(index, ids, text, finish or None, step_logprobs(result, ids, token_text))
                step = EngineStep(outputs=[out], prompt_token_ids=prompt_ids if first else None)
                if first:
                    step.queue_s = float(result.as_numpy("QUEUE_US").reshape(-1)[0]) / 1e6
                first = False
                yield step
                if finish:
                    return
            raise TritonError("Triton closed the stream before the final response")
        except Exception as exc:
            # The aio stream raises grpc's own AioRpcError (not InferenceServerException) when
            # the server cannot be reached or goes away mid-stream.
            if (down := triton_unavailable(exc, f"{model} at {self.url}")) is not None:
                raise down from exc
            raise
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
