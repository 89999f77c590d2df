"""triton_worker: sy.infer.<pool> -> Triton (gRPC stream) -> sy.stream (deltas) + sy.responses (final).

Same contract as the vLLM worker (shared/generation/engine_io.py, shared/generation/worker.py): deltas with token
and text offsets, a final response with usage and queue/TTFT/ITL timings, heartbeats with
in-flight and the partitions it consumes. While Triton is unreachable no heartbeat goes out,
so the router takes the pool out and fails its pending requests over.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
from prometheus_client import REGISTRY
from switchyard.v1.events_pb2 import Heartbeat

from shared.generation.engine_io import (
    Accumulator,
    deadline_error,
    deadline_passed,
    prompt_token_ids,
    sampling_kwargs,
)
from shared.generation.model_version import fingerprint
from shared.generation.worker import StreamPublisher, assigned_partitions, heartbeat_loop
from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, ErrorCode, Rejected, set_error
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import Emit, envelope_consumer
from shared.runtime.storage import open_store
from shared.runtime.telemetry import get_logger

from .client import ScrapedMetrics, TritonEngine, TritonError, unsupported_options
from .media import vision_inputs
from .models import ModelCatalog

log = get_logger(__name__)
STAGE = "triton_worker"


def metrics_url(settings: Settings) -> str:
    if settings.triton_metrics_url:
        return settings.triton_metrics_url
    host = (settings.triton_url or "127.0.0.1:8001").rsplit(":", 1)[0]
    return f"http://{host}:8002/metrics"


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    if not settings.triton_url:
        raise RuntimeError("SY_TRITON_URL is not set (the launcher sets it for the embedded tritonserver)")
    pool = settings.triton_pool
    try:
        pool_models = set(settings.pool(pool).models)
    except KeyError:
        raise RuntimeError(f"SY_TRITON_POOL={pool!r} is not a pool in SY_POOLS") from None
    engine = TritonEngine(settings.triton_url, metrics_url(settings), settings.triton_timeout_s)
    started = time.monotonic()
    while not await engine.live():  # the launcher starts Triton in the background
        if time.monotonic() - started > 10:
            log.info("waiting for Triton", url=settings.triton_url)
            started = time.monotonic()
        await asyncio.sleep(0.5)
    await engine.refresh()
    catalog = ModelCatalog(engine.client, settings.model_dir)
    store = open_store(settings)  # images of a VLM request (preprocess stored them: claim check)
    # Tokenizers load before the first heartbeat: importing transformers on the first request
    # stalled the event loop for seconds, long enough for the router to take the pool out.
    for name in sorted(engine.ready_models & pool_models):
        try:
            await catalog.get(name)
        except Rejected as exc:
            log.warning("model not servable", model=name, reason=exc.reason)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one metrics scrape per heartbeat
    memo = settings.var_dir / "run" / "model-fingerprints.json"
    versions = {  # weights fingerprints (cache invalidation), for models built under SY_MODELS_DIR
        m: await asyncio.to_thread(fingerprint, settings.model_dir / m, memo)
        for m in sorted(pool_models)
        if (settings.model_dir / m).is_dir()
    }
    scraped = ScrapedMetrics()
    REGISTRY.register(scraped)
    state = {"live": True}
    health.add_check("triton", lambda: state["live"])
    stream_topic, responses = settings.topic("stream"), settings.topic("responses")
    worker = settings.instance_id
    in_flight = 0

    def refuse(env: Envelope, exc: Rejected) -> list[Emit]:
        return [Emit(responses, set_error(env, exc.code, exc.reason, STAGE, exc.http_status))]

    async def handle(env: Envelope) -> list[Emit]:
        nonlocal in_flight
        try:
            if deadline_passed(env):
                raise deadline_error()
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
            model = await catalog.get(env.model)
            ids = prompt_token_ids(model.tokenizer, env)
            ids, images = await vision_inputs(env, ids, model, store, settings.s3_bucket)
            kw = sampling_kwargs(env, len(ids), model.max_len)
            bad = unsupported_options(kw)
            if bad:
                raise Rejected(
                    ErrorCode.INVALID_REQUEST, f"pool {pool!r} (Triton) does not support {', '.join(bad)}"
                )
        except Rejected as exc:
            return refuse(env, exc)
        acc = Accumulator(kw["n"], worker, stage=STAGE, top_logprobs=kw.get("logprobs"))
        stream = StreamPublisher(producer, stream_topic, env, settings.stream_flush_ms)
        in_flight += 1
        try:
            # Unique per attempt: a redelivered request may reach Triton while the old one runs,
            # and per tenant: two tenants may send the same request id (DESIGN §6).
            rid = f"{env.tenant}/{env.request_id}:{time.time_ns()}"
            async for step in engine.generate(env.model, ids, kw, rid, model.token_text, images):
                await stream.add(acc.add(step, env.request_id, env.tenant))
        except TritonError as exc:
            raise RuntimeError(f"Triton failed: {exc}") from exc  # retried, then DLQ + error reply
        finally:
            in_flight -= 1
        await stream.close()  # the final response carries the whole text: no wait for delta acks
        env.response.CopyFrom(acc.response(pool))
        env.response.model_version = versions.get(env.model, "")
        acc.add_timings(env, time.time_ns())
        return [Emit(responses, env)]

    consumer = envelope_consumer(
        STAGE, f"infer.{pool}", handle, producer, settings, max_in_flight=settings.triton_max_in_flight
    )
    consumer_topic = settings.topic(f"infer.{pool}")

    def heartbeat() -> Heartbeat:
        if not state["live"]:
            raise RuntimeError("Triton is not ready; no heartbeat")
        models = sorted(engine.ready_models & pool_models)
        return Heartbeat(
            pool=pool,
            worker_id=worker,
            engine="triton",
            models=models,
            model_versions={m: versions[m] for m in models if m in versions},
            in_flight=in_flight,
            max_in_flight=settings.triton_max_in_flight,
            queue_depth=scraped.pending(),
            modalities=list(settings.pool(pool).modalities),
            max_lora_rank=0,
            partitions=assigned_partitions(consumer, consumer_topic),
        )

    async def heartbeats(stop: asyncio.Event) -> None:
        await heartbeat_loop(settings, producer, heartbeat, stop)

    async def watch(stop: asyncio.Event) -> None:
        """Server liveness, the ready models and Triton's metrics, once per heartbeat interval."""
        async with httpx.AsyncClient(timeout=2.0) as http:
            while not stop.is_set():
                live = await engine.live()
                if live != state["live"]:
                    log.warning("Triton liveness changed", live=live, url=settings.triton_url)
                state["live"] = live
                if live:
                    try:
                        await engine.refresh()
                        await scraped.scrape(http, engine.metrics_url)
                    except Exception as exc:  # noqa: BLE001 - metrics are best effort
                        log.debug("triton scrape failed", error=str(exc))
                try:
                    await asyncio.wait_for(stop.wait(), timeout=settings.heartbeat_interval_s)
                except TimeoutError:
                    pass

    async def shutdown() -> None:
        await engine.close()

    return Service([consumer], background=[heartbeats, watch], on_stop=[shutdown])


def main() -> None:
    run_service(STAGE, build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
