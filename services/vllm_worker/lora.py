"""Which LoRA a request runs with, when adapters load, and what adapter events change.

Each adapter version maps to one stable LoRA id (`adapters.lora_id`), so every worker and
every restart names it the same; the engine keeps up to `max_cpu_loras` loaded and batches
up to `max_loras` at once. Base-model requests run through a zero-weight adapter whenever
LoRA is on (see `adapters.zero_adapter`). No Kafka and no HTTP here: `resolve` and `fetch`
are passed in by generation.py (the registry).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from switchyard.v1.envelope_pb2 import AdapterRef
from switchyard.v1.events_pb2 import AdapterEvent

from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, ErrorCode, Rejected
from shared.runtime.telemetry import add_timing, get_logger

from .adapters import BASE_ADAPTER, AdapterCache, Entry, Fetch, lora_id, zero_adapter
from .engine import lora_rank

log = get_logger(__name__)

# resolve(tenant, ref) -> the pinned AdapterRef, or None when unknown or not visible.
Resolve = Callable[[str, str], Awaitable[AdapterRef | None]]


class LoraManager:
    def __init__(self, settings: Settings, engine: Any, fetch: Fetch, resolve: Resolve) -> None:
        self.settings = settings
        self.engine = engine
        self.cache = AdapterCache(settings.adapter_cache_path, settings.adapter_cache_bytes, fetch)
        self._resolve = resolve
        self._loaded: dict[int, str] = {}  # engine LoRA id -> name@version
        self.base: Any = None
        self.started_ns = time.time_ns()

    async def start(self) -> None:
        """Load the zero adapter base requests run through, so the first one pays nothing."""
        from vllm.lora.request import LoRARequest

        path = zero_adapter(
            Path(self.settings.model_path()),
            self.settings.adapter_cache_path / "_base" / self.settings.vllm_model,
            rank=min(8, lora_rank(self.settings)),
        )
        self.base = LoRARequest(BASE_ADAPTER, lora_id(BASE_ADAPTER, 0), str(path))
        await self.engine.add_lora(self.base)

    def resident(self) -> list[str]:
        return sorted(self._loaded.values())

    async def pinned(self, env: Envelope) -> AdapterRef:
        """The request's adapter version: preprocess pins it; resolve here only if it did not."""
        if env.HasField("adapter_ref") and env.adapter_ref.name and env.adapter_ref.version:
            return env.adapter_ref
        ref = await self._resolve(env.tenant, env.adapter)
        if ref is None:
            raise Rejected(ErrorCode.ADAPTER_NOT_FOUND, f"adapter {env.adapter!r} does not exist", 404)
        env.adapter_ref.CopyFrom(ref)
        return ref

    async def for_request(self, env: Envelope) -> tuple[Any, Entry | None]:
        """The LoRARequest to run `env` with, and the cache entry to release afterwards."""
        from vllm.lora.request import LoRARequest

        if not env.adapter:
            return self.base, None
        ref = await self.pinned(env)
        if ref.rank > lora_rank(self.settings):
            raise Rejected(
                ErrorCode.ADAPTER_INVALID,
                f"adapter {ref.name}@{ref.version} has rank {ref.rank}; this pool serves up to "
                f"{lora_rank(self.settings)}",
                400,
            )
        start = time.time_ns()
        try:
            entry, downloaded = await self.cache.acquire(ref)
        except FileNotFoundError as exc:
            raise Rejected(ErrorCode.ADAPTER_NOT_FOUND, str(exc), 404) from exc
        except ValueError as exc:  # sha256 mismatch: never serve weights we cannot vouch for
            raise Rejected(ErrorCode.ADAPTER_INVALID, str(exc), 502) from exc
        lid = lora_id(ref.name, ref.version)
        lora = LoRARequest(entry.label, lid, str(entry.path))
        loaded = lid not in self._loaded
        if loaded:
            try:
                await self.engine.add_lora(lora)
            except Exception as exc:
                self.cache.release(entry)
                raise Rejected(
                    ErrorCode.ADAPTER_INVALID, f"engine could not load {entry.label}: {exc}", 422
                ) from exc
            self._loaded[lid] = entry.label
        if downloaded or loaded:
            add_timing(
                env,
                "adapter_load",
                start,
                time.time_ns(),
                parent="vllm_worker",
                adapter=entry.label,
                downloaded=downloaded,
                bytes=entry.size,
            )
        return lora, entry

    def release(self, entry: Entry) -> None:
        self.cache.release(entry)

    async def refresh_loaded(self) -> None:
        """The engine evicts by its own LRU (max_cpu_loras): re-read what it holds."""
        ids = await self.engine.loaded_loras()
        self._loaded = {i: label for i, label in self._loaded.items() if i in ids}

    async def evict(self, name: str, version: int | None = None) -> None:
        for entry in self.cache.evict(name, version):
            lid = lora_id(entry.name, entry.version)
            if self._loaded.pop(lid, None) is not None:
                await self.engine.remove_lora(lid)
                log.info("adapter unloaded from engine", adapter=entry.label)
        if version is not None:  # loaded in the engine but no longer on disk
            lid = lora_id(name, version)
            if self._loaded.pop(lid, None) is not None:
                await self.engine.remove_lora(lid)

    async def on_event(self, ev: AdapterEvent) -> None:
        """Deleted versions are evicted at once; an alias move (or a publish, which moves `latest`)
        prefetches the new version of an adapter this worker already serves."""
        live = {v.version for v in ev.versions}
        if ev.type == AdapterEvent.TYPE_DELETED:
            await self.evict(ev.name)
            return
        for label in [*self.cache.resident(), *self._loaded.values()]:
            name, _, version = label.rpartition("@")
            if name == ev.name and int(version) not in live:
                await self.evict(name, int(version))
        if (
            ev.type in (AdapterEvent.TYPE_ALIAS_MOVED, AdapterEvent.TYPE_PUBLISHED)  # publish moves `latest`
            and ev.version > 0
            and ev.sent_unix_ns >= self.started_ns
            and any(label.rpartition("@")[0] == ev.name for label in self.cache.resident())
            and not self.cache.has(ev.name, ev.version)
        ):
            v = next((v for v in ev.versions if v.version == ev.version), None)
            if v is None:
                return
            ref = AdapterRef(
                name=ev.name,
                version=v.version,
                sha256=v.sha256,
                owner=ev.owner,
                rank=v.rank,
                base_model=v.base_model,
                size_bytes=v.size_bytes,
                config_sha256=v.config_sha256,
            )
            entry, _ = await self.cache.acquire(ref)
            self.cache.release(entry)
            log.info("adapter prefetched on alias move", adapter=entry.label, alias=ev.alias)
