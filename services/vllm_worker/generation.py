"""vLLM as a GenerationWorker's engine (shared/generation/engine.py): the in-process AsyncLLM,
the model's fingerprint, and LoRA adapters when the pool serves them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp
from switchyard.v1.envelope_pb2 import AdapterRef
from switchyard.v1.events_pb2 import AdapterEvent

from shared.adapters.refs import ref_from_manifest
from shared.adapters.registry_client import ADAPTER_FILES, ChecksumMismatch, RegistryClient, RegistryError
from shared.generation.engine import Background, EngineLoad, Job
from shared.generation.engine_io import prompt_token_ids, sampling_kwargs
from shared.generation.model_version import fingerprint
from shared.runtime.config import Settings
from shared.runtime.cpus import parse_cpus, pin_process
from shared.runtime.envelope import Envelope, ErrorCode, Rejected
from shared.runtime.follow import follow
from shared.runtime.telemetry import get_logger

from .api import profile_api
from .engine import Engine, lora_rank
from .lora import LoraManager

log = get_logger(__name__)


class RegistryAdapters:
    """Adapter files and refs from the registry, for the LoraManager (as the owner: preprocess
    checked the tenant's access)."""

    def __init__(self, settings: Settings) -> None:
        self.registry = RegistryClient(settings)

    async def fetch(self, ref: AdapterRef, dest: Path) -> None:
        """Both files of a version, sha256-checked."""
        weights, config = ADAPTER_FILES
        try:
            for name, sha in ((weights, ref.sha256), (config, ref.config_sha256)):
                await self.registry.download(ref.owner, ref.name, ref.version, name, dest / name, sha)
        except ChecksumMismatch as exc:
            raise ValueError(str(exc)) from exc
        except RegistryError as exc:
            if exc.status == 404:
                raise FileNotFoundError(f"adapter {ref.name}@{ref.version} no longer exists") from exc
            raise

    async def resolve(self, tenant: str, ref: str) -> AdapterRef | None:
        manifest = await self.registry.resolve(tenant, ref)
        return ref_from_manifest(manifest, ref) if manifest is not None else None


class VllmGeneration:
    """The vLLM worker's engine: one model, LoRA adapters when SY_VLLM_ENABLE_LORA is on."""

    stage = "vllm_worker"
    engine = "vllm"
    health_check = "engine"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pool = settings.vllm_pool
        self.max_in_flight = settings.vllm_max_num_seqs
        self.llm = Engine(settings)
        self.loras: LoraManager | None = None
        self.version = ""

    async def start(self) -> None:
        settings = self.settings
        await self.llm.start()
        if settings.frontend_cpus:  # the engine process has started with every core; leave it most of them
            pin_process(parse_cpus(settings.frontend_cpus))
            log.info("frontend_pinned", cpus=settings.frontend_cpus)
        self.version = await asyncio.to_thread(
            fingerprint, settings.model_path(), settings.var_dir / "run" / "model-fingerprints.json"
        )
        if lora_rank(settings):
            registry = RegistryAdapters(settings)
            self.loras = LoraManager(settings, self.llm, registry.fetch, registry.resolve)
            await self.loras.start()

    async def stop(self) -> None:
        self.llm.shutdown()

    @property
    def ready(self) -> bool:
        return self.llm.ready

    async def prepare(self, env: Envelope) -> Job:
        from vllm import SamplingParams
        from vllm.exceptions import VLLMClientError
        from vllm.sampling_params import RequestOutputKind

        ids = prompt_token_ids(self.llm.tokenizer, env)
        kw = sampling_kwargs(env, len(ids), self.settings.vllm_max_model_len, self.llm.vocab_size)
        # A reply nobody streams needs its first token (TTFT) and its end: vLLM's front end then
        # builds two outputs per sequence instead of one per token or stream interval (a rollout:
        # 64 tokens x n samples), on the services' core. Streams keep SY_VLLM_STREAM_INTERVAL.
        every = None if env.request.sampling.stream else max(1, kw["max_tokens"])
        try:
            params = SamplingParams(**kw, output_kind=RequestOutputKind.DELTA, stream_interval=every)
        except (ValueError, VLLMClientError) as exc:  # vLLM's own checks: the request's fault, not ours
            raise Rejected(ErrorCode.INVALID_REQUEST, f"invalid sampling parameters: {exc}") from None
        if self.loras is None:
            if env.adapter:
                reason = f"pool {self.pool!r} does not serve LoRA adapters (SY_VLLM_ENABLE_LORA is off)"
                raise Rejected(ErrorCode.NO_POOL, reason, 404)
            return Job(kw, (ids, params, None))
        loras = self.loras
        lora, held = await loras.for_request(env)
        release = (lambda: loras.release(held)) if held is not None else None
        return Job(kw, (ids, params, lora), release)

    async def generate(self, env: Envelope, job: Job, attempt: str) -> AsyncIterator[Any]:
        ids, params, lora = job.inputs
        async for out in self.llm.generate(ids, params, attempt, lora):
            yield out

    def model_version(self, model: str) -> str:
        return self.version  # one model per worker

    def load(self) -> EngineLoad:
        state = self.llm.state
        return EngineLoad(
            models=[self.settings.vllm_model],
            model_versions={self.settings.vllm_model: self.version},
            queue_depth=state.waiting,
            kv_usage=state.kv_usage,
            modalities=["text"],
            max_lora_rank=lora_rank(self.settings),
            adapters=self.loras.resident() if self.loras is not None else [],
        )

    async def refresh(self) -> None:
        if self.loras is not None:
            await self.loras.refresh_loaded()

    async def watchdog(self, stop: asyncio.Event) -> None:
        """A dead engine cannot recover in-process: exit so the supervisor restarts the worker."""
        while not stop.is_set():
            if not self.llm.ready:
                log.error("engine is dead; stopping")
                raise RuntimeError("vLLM engine died")
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                pass

    async def on_adapter_event(self, rec: Any) -> None:
        assert self.loras is not None
        await self.loras.on_event(AdapterEvent.FromString(rec.value))

    async def adapter_events(self, stop: asyncio.Event) -> None:
        """Deleted versions leave disk and engine; alias moves prefetch (sy.adapters, all of it)."""
        settings = self.settings
        await follow(
            settings, settings.topic("adapters"), self.on_adapter_event, stop, client_id="vllm-adapters"
        )

    def background(self) -> list[Background]:
        tasks: list[Background] = [self.watchdog]
        if self.loras is not None:
            tasks.append(self.adapter_events)
        return tasks

    def app(self) -> ASGIApp | None:
        return profile_api(self.settings, self.llm)
