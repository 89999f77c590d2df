"""Triton Inference Server as a GenerationWorker's engine (shared/generation/engine.py).

Same contract as the vLLM worker: deltas with token and text offsets, a final response with
usage and queue/TTFT/ITL timings, heartbeats with in-flight and the partitions it consumes.
While Triton is unreachable no heartbeat goes out, so the router takes the pool out and fails
its pending requests over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from prometheus_client import REGISTRY
from starlette.types import ASGIApp

from shared.generation.engine import Background, EngineLoad, Job
from shared.generation.engine_io import prompt_token_ids, sampling_kwargs
from shared.generation.model_version import fingerprint
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, ErrorCode, Rejected
from shared.runtime.storage import open_store
from shared.runtime.telemetry import get_logger

from .client import ScrapedMetrics, TritonEngine, TritonError, unsupported_options
from .media import media_inputs
from .models import ModelCatalog

log = get_logger(__name__)


def metrics_url(settings: Settings) -> str:
    if settings.triton_metrics_url:
        return settings.triton_metrics_url
    host = (settings.triton_url or "127.0.0.1:8001").rsplit(":", 1)[0]
    return f"http://{host}:8002/metrics"


class TritonGeneration:
    """The Triton worker's engine: the ready models of the pool, each with its own tokenizer."""

    stage = "triton_worker"
    engine = "triton"
    health_check = "triton"

    def __init__(self, settings: Settings) -> None:
        if not settings.triton_url:
            raise RuntimeError(
                "SY_TRITON_URL is not set (the launcher sets it for the embedded tritonserver)"
            )
        self.settings = settings
        self.pool = settings.triton_pool
        self.max_in_flight = settings.triton_max_in_flight
        try:
            self.pool_models = set(settings.pool(self.pool).models)
        except KeyError:
            raise RuntimeError(f"SY_TRITON_POOL={self.pool!r} is not a pool in SY_POOLS") from None
        self.client = TritonEngine(settings.triton_url, metrics_url(settings), settings.triton_timeout_s)
        self.catalog = ModelCatalog(self.client.client, settings.model_dir)
        self.versions: dict[str, str] = {}
        self.scraped = ScrapedMetrics()
        self.live = True
        self.store: Any = None

    async def start(self) -> None:
        settings, engine = self.settings, self.client
        started = time.monotonic()
        while not await engine.live():  # the launcher starts Triton in the background
            if time.monotonic() - started > 10:
                log.info("waiting for Triton", url=settings.triton_url)
                started = time.monotonic()
            await asyncio.sleep(0.5)
        await engine.refresh()
        # Images and audio of a multimodal request (preprocess stored them: claim check).
        self.store = open_store(settings)
        # Tokenizers load before the first heartbeat: importing transformers on the first request
        # stalled the event loop for seconds, long enough for the router to take the pool out.
        for name in sorted(engine.ready_models & self.pool_models):
            try:
                await self.catalog.get(name)
            except Rejected as exc:
                log.warning("model not servable", model=name, reason=exc.reason)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one metrics scrape per heartbeat
        memo = settings.var_dir / "run" / "model-fingerprints.json"
        self.versions = {  # weights fingerprints (cache invalidation), for models built under SY_MODELS_DIR
            m: await asyncio.to_thread(fingerprint, settings.model_dir / m, memo)
            for m in sorted(self.pool_models)
            if (settings.model_dir / m).is_dir()
        }
        REGISTRY.register(self.scraped)

    async def stop(self) -> None:
        await self.client.close()

    @property
    def ready(self) -> bool:
        return self.live

    async def prepare(self, env: Envelope) -> Job:
        engine, pool = self.client, self.pool
        if env.adapter:
            raise Rejected(ErrorCode.NO_POOL, f"pool {pool!r} (Triton) does not serve LoRA adapters", 404)
        if env.model not in engine.ready_models:
            await engine.refresh()
        if env.model not in engine.ready_models:
            raise Rejected(
                ErrorCode.NO_POOL,
                f"Triton has no ready model {env.model!r}; ready: {sorted(engine.ready_models)}",
                404,
            )
        model = await self.catalog.get(env.model)
        ids = prompt_token_ids(model.tokenizer, env)
        ids, media = await media_inputs(env, ids, model, self.store, self.settings.s3_bucket)
        kw = sampling_kwargs(env, len(ids), model.max_len)
        bad = unsupported_options(kw)
        if bad:
            raise Rejected(
                ErrorCode.INVALID_REQUEST, f"pool {pool!r} (Triton) does not support {', '.join(bad)}"
            )
        return Job(kw, (model, ids, media))

    async def generate(self, env: Envelope, job: Job, attempt: str) -> AsyncIterator[Any]:
        model, ids, media = job.inputs
        try:
            async for step in self.client.generate(env.model, ids, job.kw, attempt, model.token_text, media):
                yield step
        except TritonError as exc:
            raise RuntimeError(f"Triton failed: {exc}") from exc  # retried, then DLQ + error reply

    def model_version(self, model: str) -> str:
        return self.versions.get(model, "")

    def load(self) -> EngineLoad:
        if not self.live:
            raise RuntimeError("Triton is not ready; no heartbeat")
        models = sorted(self.client.ready_models & self.pool_models)
        return EngineLoad(
            models=models,
            model_versions={m: self.versions[m] for m in models if m in self.versions},
            queue_depth=self.scraped.pending(),
            modalities=list(self.settings.pool(self.pool).modalities),
        )

    async def refresh(self) -> None:
        """Nothing before a heartbeat: `watch` keeps the state fresh on its own."""

    async def watch(self, stop: asyncio.Event) -> None:
        """Server liveness, the ready models and Triton's metrics, once per heartbeat interval."""
        engine = self.client
        async with httpx.AsyncClient(timeout=2.0) as http:
            while not stop.is_set():
                live = await engine.live()
                if live != self.live:
                    log.warning("Triton liveness changed", live=live, url=self.settings.triton_url)
                self.live = live
                if live:
                    try:
                        await engine.refresh()
                        await self.scraped.scrape(http, engine.metrics_url)
                    except Exception as exc:  # noqa: BLE001 - metrics are best effort
                        log.debug("triton scrape failed", error=str(exc))
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.settings.heartbeat_interval_s)
                except TimeoutError:
                    pass

    def background(self) -> list[Background]:
        return [self.watch]

    def app(self) -> ASGIApp | None:
        return None
