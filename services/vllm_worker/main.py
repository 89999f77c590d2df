"""vllm_worker: sy.infer.<pool> -> sy.stream (deltas) + sy.responses (final), heartbeats to sy.heartbeats."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from switchyard.v1.envelope_pb2 import AdapterRef
from switchyard.v1.events_pb2 import AdapterEvent, Heartbeat

from shared.adapters.refs import ref_from_manifest
from shared.adapters.registry_client import ADAPTER_FILES, ChecksumMismatch, RegistryClient, RegistryError
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
from shared.runtime.cpus import parse_cpus, pin_process
from shared.runtime.envelope import Envelope, ErrorCode, Rejected, set_error
from shared.runtime.follow import follow
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import Emit, envelope_consumer
from shared.runtime.telemetry import get_logger

from .api import profile_api
from .engine import Engine, lora_rank
from .lora import LoraManager

log = get_logger(__name__)


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    engine = Engine(settings)
    await engine.start()
    if settings.frontend_cpus:  # the engine process has started with every core; leave it most of them
        pin_process(parse_cpus(settings.frontend_cpus))
        log.info("frontend_pinned", cpus=settings.frontend_cpus)
    model_version = await asyncio.to_thread(
        fingerprint, settings.model_path(), settings.var_dir / "run" / "model-fingerprints.json"
    )
    health.add_check("engine", lambda: engine.ready)
    loras: LoraManager | None = None
    if lora_rank(settings):
        registry = RegistryClient(settings)

        async def fetch(ref: AdapterRef, dest: Path) -> None:
            """Both files of a version, sha256-checked (as the owner: preprocess checked access)."""
            weights, config = ADAPTER_FILES
            try:
                for name, sha in ((weights, ref.sha256), (config, ref.config_sha256)):
                    await registry.download(ref.owner, ref.name, ref.version, name, dest / name, sha)
            except ChecksumMismatch as exc:
                raise ValueError(str(exc)) from exc
            except RegistryError as exc:
                if exc.status == 404:
                    raise FileNotFoundError(f"adapter {ref.name}@{ref.version} no longer exists") from exc
                raise

        async def resolve(tenant: str, ref: str) -> AdapterRef | None:
            manifest = await registry.resolve(tenant, ref)
            return ref_from_manifest(manifest, ref) if manifest is not None else None

        loras = LoraManager(settings, engine, fetch, resolve)
        await loras.start()
    stream_topic, responses = settings.topic("stream"), settings.topic("responses")
    pool, worker = settings.vllm_pool, settings.instance_id
    in_flight = 0

    async def handle(env: Envelope) -> list[Emit]:
        nonlocal in_flight
        try:
            if deadline_passed(env):
                raise deadline_error()
            ids = prompt_token_ids(engine.tokenizer, env)
            kw = sampling_kwargs(env, len(ids), settings.vllm_max_model_len)
        except Rejected as exc:
            return [Emit(responses, set_error(env, exc.code, exc.reason, "vllm_worker", exc.http_status))]
        # A reply nobody streams needs its first token (TTFT) and its end: vLLM's front end then
        # builds two outputs per sequence instead of one per token or stream interval (a rollout:
        # 64 tokens x n samples), on the services' core. Streams keep SY_VLLM_STREAM_INTERVAL.
        every = None if env.request.sampling.stream else max(1, kw["max_tokens"])
        params = SamplingParams(**kw, output_kind=RequestOutputKind.DELTA, stream_interval=every)
        lora, held = None, None
        if loras is not None:
            try:
                lora, held = await loras.for_request(env)
            except Rejected as exc:
                return [Emit(responses, set_error(env, exc.code, exc.reason, "vllm_worker", exc.http_status))]
        elif env.adapter:
            reason = f"pool {pool!r} does not serve LoRA adapters (SY_VLLM_ENABLE_LORA is off)"
            return [Emit(responses, set_error(env, ErrorCode.NO_POOL, reason, "vllm_worker", 404))]
        acc = Accumulator(kw["n"], worker, top_logprobs=kw.get("logprobs"))
        stream = StreamPublisher(producer, stream_topic, env, settings.stream_flush_ms)

        in_flight += 1
        try:
            # Unique per attempt: a redelivered request may reach this engine while the old one runs,
            # and per tenant: two tenants may send the same request id (DESIGN §6).
            attempt = f"{env.tenant}/{env.request_id}:{time.time_ns()}"
            async for out in engine.generate(ids, params, attempt, lora):
                await stream.add(acc.add(out, env.request_id, env.tenant))
        finally:
            in_flight -= 1
            if held is not None and loras is not None:
                loras.release(held)
        await stream.close()  # the final response carries the whole text: no wait for delta acks
        finished = time.time_ns()
        env.response.CopyFrom(acc.response(pool))
        env.response.model_version = model_version
        acc.add_timings(env, finished)
        return [Emit(responses, env)]

    consumer = envelope_consumer(
        "vllm_worker", f"infer.{pool}", handle, producer, settings, max_in_flight=settings.vllm_max_num_seqs
    )
    consumer_topic = settings.topic(f"infer.{pool}")

    async def refresh() -> None:
        if loras is not None:
            await loras.refresh_loaded()

    def heartbeat() -> Heartbeat:
        return Heartbeat(
            pool=pool,
            worker_id=worker,
            engine="vllm",
            models=[settings.vllm_model],
            model_versions={settings.vllm_model: model_version},
            in_flight=in_flight,
            max_in_flight=settings.vllm_max_num_seqs,
            queue_depth=engine.state.waiting,
            kv_usage=engine.state.kv_usage,
            modalities=["text"],
            max_lora_rank=lora_rank(settings),
            adapters=loras.resident() if loras is not None else [],
            partitions=assigned_partitions(consumer, consumer_topic),
        )

    async def heartbeats(stop: asyncio.Event) -> None:
        await heartbeat_loop(settings, producer, heartbeat, stop, before=refresh)

    async def watchdog(stop: asyncio.Event) -> None:
        """A dead engine cannot recover in-process: exit so the supervisor restarts the worker."""
        while not stop.is_set():
            if not engine.ready:
                log.error("engine is dead; stopping")
                raise RuntimeError("vLLM engine died")
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                pass

    async def shutdown() -> None:
        engine.shutdown()

    background = [heartbeats, watchdog]
    if loras is not None:
        manager = loras

        async def on_adapter_event(rec: object) -> None:
            await manager.on_event(AdapterEvent.FromString(rec.value))  # type: ignore[attr-defined]

        async def adapter_events(stop: asyncio.Event) -> None:
            """Deleted versions leave disk and engine; alias moves prefetch (sy.adapters, all of it)."""
            await follow(
                settings, settings.topic("adapters"), on_adapter_event, stop, client_id="vllm-adapters"
            )

        background.append(adapter_events)
    return Service([consumer], background=background, on_stop=[shutdown], app=profile_api(settings, engine))


def main() -> None:
    run_service(
        "vllm_worker",
        build,
        secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()),
    )


if __name__ == "__main__":
    main()
