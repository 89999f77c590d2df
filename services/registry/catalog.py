"""Adapter versions, aliases and ownership over an ObjectStore (no HTTP, no Kafka).

Layout: `adapters/<name>/v<N>/{adapter_model.safetensors, adapter_config.json, manifest.json}`
and `adapters/<name>/state.json` (owner, visibility, aliases, next_version). A version exists
only once its manifest exists (written last, deleted first); state.json is rewritten as one
put, so an alias move is atomic. The registry is the single writer: changes to one adapter
are serialised by a lock, and the in-memory view is rebuilt from the store at start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from switchyard.v1.events_pb2 import AdapterEvent, AdapterVersion

from shared.adapters.registry_client import ADAPTER_FILES, Adapter, Manifest
from shared.runtime.storage import Data, ObjectStore
from shared.runtime.telemetry import get_logger

from .names import LATEST, RegistryError, check_alias, check_name, parse_ref
from .state import (
    CONFIG_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    PREFIX,
    STATE_FILE,
    AdapterState,
    not_found,
    object_key,
)
from .validate import CheckedAdapter

log = get_logger(__name__)


Publish = Callable[[AdapterEvent], Awaitable[None]]


class Catalog:
    def __init__(self, store: ObjectStore, publish: Publish | None = None) -> None:
        self.store = store
        self._publish = publish
        self._adapters: dict[str, AdapterState] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._unsent: dict[str, AdapterEvent] = {}

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    # ------------------------------------------------------------------ start-up
    async def load(self) -> None:
        """Rebuild the view from the store; drop version folders without a manifest."""
        objects = await self.store.list(PREFIX)
        by_name: dict[str, dict[str, Any]] = {}
        for info in objects:
            parts = info.key.split("/")
            if len(parts) == 3 and parts[2] == STATE_FILE:
                by_name.setdefault(parts[1], {}).setdefault("state", True)
            elif len(parts) == 4 and parts[2].startswith("v") and parts[2][1:].isdigit():
                by_name.setdefault(parts[1], {}).setdefault("versions", {}).setdefault(
                    int(parts[2][1:]), set()
                ).add(parts[3])
        self._adapters.clear()
        for name, found in sorted(by_name.items()):
            state = await self._read_state(name) if found.get("state") else None
            versions: dict[int, Manifest] = {}
            for v, files in sorted(found.get("versions", {}).items()):
                if MANIFEST_FILE not in files:
                    removed = await self.store.delete_prefix(object_key(name, f"v{v}") + "/")
                    log.warning("removed unfinished adapter version", adapter=name, version=v, files=removed)
                    continue
                versions[v] = Manifest.model_validate_json(
                    await self.store.get(object_key(name, f"v{v}", MANIFEST_FILE))
                )
            if state is None:
                if not versions:
                    continue
                first = versions[min(versions)]  # state.json lost: the manifests still say who owns it
                state = AdapterState(name, first.owner, first.visibility)
            state.versions = versions
            if versions:
                state.deleted = False
                state.next_version = max(state.next_version, max(versions) + 1)
            state.aliases = {a: v for a, v in state.aliases.items() if v in versions}
            state.fix_latest()
            self._adapters[name] = state
            if not state.deleted:
                # State may have changed without its event (crash in between): resync readers.
                self._unsent[name] = self._event(state, AdapterEvent.TYPE_UNSPECIFIED)
        log.info("catalog loaded", adapters=len(self.live()))

    async def _read_state(self, name: str) -> AdapterState:
        return AdapterState.from_json(name, await self.store.get(object_key(name, STATE_FILE)))

    # ------------------------------------------------------------------ reads
    def live(self) -> list[AdapterState]:
        return [s for s in self._adapters.values() if not s.deleted]

    def _visible(self, tenant: str, name: str) -> AdapterState:
        """The adapter if the tenant may see it; 404 otherwise (never confirm existence)."""
        s = self._adapters.get(name)
        if s is None or s.deleted or (s.owner != tenant and s.visibility != "public"):
            raise not_found(f"adapter {name!r}")
        return s

    def _owned(self, tenant: str, name: str) -> AdapterState:
        s = self._visible(tenant, name)
        if s.owner != tenant:
            raise RegistryError(403, f"adapter {name!r} belongs to another tenant", "forbidden")
        return s

    def visible(self, tenant: str) -> list[Adapter]:
        return [
            s.view()
            for s in sorted(self.live(), key=lambda s: s.name)
            if s.owner == tenant or s.visibility == "public"
        ]

    def get(self, tenant: str, name: str) -> Adapter:
        return self._visible(tenant, name).view()

    def version(self, tenant: str, name: str, version: int) -> Manifest:
        s = self._visible(tenant, name)
        if version not in s.versions:
            raise not_found(f"adapter {name!r} version {version}")
        return s.manifest(version)

    def resolve(self, tenant: str, ref: str) -> Manifest:
        name, version, alias = parse_ref(ref)
        s = self._visible(tenant, name)
        if alias is not None:
            if alias not in s.aliases:
                raise not_found(f"alias {name}@{alias}")
            version = s.aliases[alias]
        assert version is not None
        if version not in s.versions:
            raise not_found(f"adapter {name!r} version {version}")
        return s.manifest(version)

    async def open_file(
        self, tenant: str, name: str, version: int, filename: str
    ) -> tuple[Manifest, AsyncIterator[bytes]]:
        if filename not in ADAPTER_FILES:
            raise not_found(f"file {filename!r}")
        m = self.version(tenant, name, version)
        return m, self.store.stream(object_key(name, f"v{version}", filename))

    # ------------------------------------------------------------------ events
    def _event(self, s: AdapterState, type_: int, **what: Any) -> AdapterEvent:
        ev = AdapterEvent(type=type_, name=s.name, owner=s.owner, visibility=s.visibility, **what)  # type: ignore[arg-type]
        for v in sorted(s.versions):
            m = s.versions[v]
            ev.versions.append(
                AdapterVersion(
                    version=v,
                    sha256=m.sha256,
                    size_bytes=m.size_bytes,
                    config_sha256=m.config_sha256,
                    rank=m.rank,
                    alpha=m.alpha,
                    target_modules=m.target_modules,
                    base_model=m.base_model,
                    created_unix_ns=m.created_unix_ns,
                )
            )
        ev.aliases.update(s.aliases)
        return ev

    async def _emit(self, ev: AdapterEvent) -> None:
        """Publish after the change is stored; a failed publish is kept and retried."""
        self._unsent.pop(ev.name, None)
        if self._publish is None:
            return
        ev.sent_unix_ns = time.time_ns()
        try:
            await self._publish(ev)
        except Exception as exc:  # noqa: BLE001 - the change is stored; the event is retried
            log.error("adapter event not published; will retry", adapter=ev.name, error=repr(exc))
            self._unsent[ev.name] = ev

    def resync_all(self) -> int:
        """Queue every live adapter's state for publishing again (the topic lost it)."""
        for s in self.live():
            self._unsent[s.name] = self._event(s, AdapterEvent.TYPE_UNSPECIFIED)
        return len(self._unsent)

    async def flush_unsent(self) -> int:
        """Retry events that failed (and the start-up resync); returns how many went out."""
        sent = 0
        for name in list(self._unsent):
            async with self._lock(name):
                ev = self._unsent.get(name)
                if ev is None:
                    continue
                s = self._adapters.get(name)
                if s is not None and not s.deleted:  # carry the current state, not the old one
                    fresh = self._event(
                        s, ev.type, version=ev.version, alias=ev.alias, previous_version=ev.previous_version
                    )
                    ev = fresh
                await self._emit(ev)
                sent += name not in self._unsent
        return sent

    # ------------------------------------------------------------------ changes
    async def _save_state(self, s: AdapterState) -> None:
        await self.store.put(object_key(s.name, STATE_FILE), s.state_json(), content_type="application/json")

    def check_can_publish(self, tenant: str, name: str, max_owned: int | None = None) -> None:
        """A name another tenant owns is not available, and a new name must fit the tenant's quota
        of adapters (both checked before the upload is read)."""
        check_name(name)
        s = self._adapters.get(name)
        if s is not None and not s.deleted and s.owner != tenant:
            raise RegistryError(409, "adapter name not available", "name_taken", "name")
        new = s is None or s.deleted
        if new and max_owned is not None:
            owned = sum(1 for a in self.live() if a.owner == tenant)
            if owned >= max_owned:
                raise RegistryError(
                    429,
                    f"this tenant owns {owned} adapters (SY_TENANT_MAX_ADAPTERS={max_owned}): "
                    "delete one or publish a new version of an existing one",
                    "too_many_adapters",
                    "name",
                )

    async def publish(
        self,
        tenant: str,
        name: str,
        checked: CheckedAdapter,
        model: Data,
        model_sha256: str,
        config_raw: bytes,
        visibility: str | None = None,
        aliases: list[str] | None = None,
    ) -> Manifest:
        """Store a new version: files, then the manifest (the version now exists), then state."""
        extra = [check_alias(a) for a in aliases or []]
        if LATEST in extra:
            raise RegistryError(400, "alias 'latest' is managed by the registry", "invalid_alias", "aliases")
        if visibility not in (None, "private", "public"):
            raise RegistryError(
                400, "visibility must be private or public", "invalid_visibility", "visibility"
            )
        async with self._lock(name):
            self.check_can_publish(tenant, name)
            s = self._adapters.get(name)
            if s is None:
                s = AdapterState(name, tenant, visibility or "private")
            elif s.deleted:
                s = AdapterState(name, tenant, visibility or "private", next_version=s.next_version)
            v = s.next_version
            folder = object_key(name, f"v{v}") + "/"
            try:
                info = await self.store.put(folder + MODEL_FILE, model)
                if info.sha256 != model_sha256:
                    raise RegistryError(
                        400, "adapter_model changed while uploading (sha256 differs)", "sha256_mismatch"
                    )
                conf = await self.store.put(folder + CONFIG_FILE, config_raw, content_type="application/json")
                manifest = Manifest(
                    name=name,
                    version=v,
                    owner=tenant,
                    visibility=visibility or s.visibility,  # type: ignore[arg-type]
                    sha256=info.sha256,
                    size_bytes=info.size,
                    config_sha256=conf.sha256,
                    rank=checked.config.rank,
                    alpha=checked.config.alpha,
                    target_modules=checked.config.target_modules,
                    base_model=checked.base_model,
                    created_unix_ns=time.time_ns(),
                )
                await self.store.put(
                    folder + MANIFEST_FILE,
                    manifest.model_dump_json(indent=2).encode(),
                    content_type="application/json",
                )
            except BaseException:
                await self.store.delete_prefix(folder)
                raise
            s.visibility = visibility or s.visibility
            s.versions[v] = manifest
            s.next_version = v + 1
            for a in extra:
                s.aliases[a] = v
            s.fix_latest()
            self._adapters[name] = s
            await self._save_state(s)
            log.info("adapter version published", adapter=name, version=v, tenant=tenant, size=info.size)
            await self._emit(self._event(s, AdapterEvent.TYPE_PUBLISHED, version=v))
            return s.manifest(v)

    async def set_alias(self, tenant: str, name: str, alias: str, version: int) -> Manifest:
        check_alias(alias)
        async with self._lock(name):
            s = self._owned(tenant, name)  # first: never tell a stranger anything about the name
            if alias == LATEST:
                raise RegistryError(
                    400, "alias 'latest' is managed by the registry", "invalid_alias", "alias"
                )
            if version not in s.versions:
                raise not_found(f"adapter {name!r} version {version}")
            previous = s.aliases.get(alias, 0)
            s.aliases[alias] = version
            await self._save_state(s)
            log.info("adapter alias moved", adapter=name, alias=alias, version=version, previous=previous)
            await self._emit(
                self._event(
                    s, AdapterEvent.TYPE_ALIAS_MOVED, version=version, alias=alias, previous_version=previous
                )
            )
            return s.manifest(version)

    async def delete_alias(self, tenant: str, name: str, alias: str) -> None:
        check_alias(alias)
        async with self._lock(name):
            s = self._owned(tenant, name)
            if alias == LATEST:
                raise RegistryError(400, "alias 'latest' cannot be deleted", "invalid_alias", "alias")
            if alias not in s.aliases:
                raise not_found(f"alias {name}@{alias}")
            previous = s.aliases.pop(alias)
            await self._save_state(s)
            log.info("adapter alias deleted", adapter=name, alias=alias, previous=previous)
            # No "alias deleted" type: an ALIAS_MOVED to version 0 means the alias is gone.
            await self._emit(
                self._event(
                    s, AdapterEvent.TYPE_ALIAS_MOVED, version=0, alias=alias, previous_version=previous
                )
            )

    async def delete_version(self, tenant: str, name: str, version: int) -> None:
        async with self._lock(name):
            s = self._owned(tenant, name)
            if version not in s.versions:
                raise not_found(f"adapter {name!r} version {version}")
            pinned = sorted(a for a, v in s.aliases.items() if v == version and a != LATEST)
            if pinned:
                raise RegistryError(
                    409,
                    f"version {version} is pointed at by alias {', '.join(repr(a) for a in pinned)}; move or delete it first",
                    "alias_in_use",
                    "version",
                )
            folder = object_key(name, f"v{version}") + "/"
            await self.store.delete(folder + MANIFEST_FILE)  # the version stops existing here
            del s.versions[version]
            s.fix_latest()
            await self._save_state(s)
            await self.store.delete_prefix(folder)
            log.info("adapter version deleted", adapter=name, version=version, tenant=tenant)
            await self._emit(self._event(s, AdapterEvent.TYPE_VERSION_DELETED, version=version))

    async def delete_adapter(self, tenant: str, name: str) -> None:
        async with self._lock(name):
            s = self._owned(tenant, name)
            for v in sorted(s.versions):
                await self.store.delete(object_key(name, f"v{v}", MANIFEST_FILE))
            gone = self._event(s, AdapterEvent.TYPE_DELETED)
            del gone.versions[:]
            gone.aliases.clear()
            folders = [object_key(name, f"v{v}") + "/" for v in s.versions]
            s.versions.clear()
            s.aliases.clear()
            s.deleted = True  # tombstone keeps next_version: numbers are never reused
            await self._save_state(s)
            for folder in folders:
                await self.store.delete_prefix(folder)
            log.info("adapter deleted", adapter=name, tenant=tenant)
            await self._emit(gone)
