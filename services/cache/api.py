"""The cache's REST API, served beside the health routes on the service's port.

GET /v1/cache/stats; DELETE /v1/cache/entries?tenant=&model=&adapter=&entry_id=;
GET/PUT/DELETE /v1/cache/tenants/{tenant} (similarity floor, target false-hit rate); POST
/v1/cache/peek (the gateway's lookup). Changes and peeks need the internal token; stats and floors are admin paths
(shared/runtime/admin.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from google.protobuf.message import DecodeError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response
from switchyard.v1.events_pb2 import CachePurge

from shared.runtime.api import rest_app
from shared.runtime.auth import is_internal
from shared.runtime.config import Settings
from shared.runtime.envelope import CONTENT_TYPE_PROTOBUF, DependencyUnavailable, Envelope
from shared.runtime.telemetry import add_timing, get_logger

from .lookup import SemanticCache
from .stage import FLOORS_KEY, TARGETS_KEY, CacheStage, load_floors, purge_of

log = get_logger(__name__)

Announce = Callable[[CachePurge], Awaitable[None]]


class TenantFloor(BaseModel):
    """A tenant's settings; a field left out keeps its value (at least one is needed)."""

    similarity_floor: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Cosine floor before the verifier"
    )
    target_error: float | None = Field(
        default=None, gt=0.0, lt=1.0, description="False-hit rate the entries' learned thresholds keep under"
    )


class TenantFloorOut(BaseModel):
    tenant: str
    similarity_floor: float = Field(description="The floor this tenant's lookups use")
    default: float = Field(description="The floor of tenants without their own")
    target_error: float = Field(description="The false-hit rate this tenant's entries are held to")
    default_target_error: float = Field(description="The target of tenants without their own")


class Deleted(BaseModel):
    deleted: int = Field(description="Entries purged from Milvus (the fronts drop theirs too)")


class ErrorDetail(BaseModel):
    message: str
    type: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class HitRate(BaseModel):
    exact: float
    semantic: float
    all: float


class LookupLatency(BaseModel):
    p50: float | None
    p99: float | None
    window: int = Field(description="Recent lookups the percentiles are of")


class EmbeddingCounts(BaseModel):
    batches: int
    reused: int


class CacheStats(BaseModel):
    """Only `ready` until the cache is up; then the counters (services/cache/lookup.py Stats)."""

    model_config = ConfigDict(extra="allow")  # a counter added to Stats is served as it is

    ready: bool
    lookups: int | None = None
    hits_exact: int | None = None
    hits_semantic: int | None = None
    bypassed: int | None = None
    rejected_by_verifier: int | None = None
    stored: int | None = None
    peeks: int | None = None
    peek_hits: int | None = None
    front_hits: int | None = None
    invalidated: int | None = None
    swept: int | None = None
    hit_rate: HitRate | None = None
    lookup_ms: LookupLatency | None = None
    entries: int | None = None
    front_entries: int | None = None
    embeddings: EmbeddingCounts | None = None


@dataclass
class CacheApi:
    """What the routes need: the settings (token, default floors), the stage, and `announce`,
    which tells the other replicas' fronts about a purge (Milvus is done by then)."""

    settings: Settings
    stage: CacheStage
    announce: Announce | None = None

    def authorised(self, req: Request) -> bool:
        return is_internal(self.settings, req.headers.get("authorization"))


def _api(request: Request) -> CacheApi:
    return request.app.state.cache_api


Api = Annotated[CacheApi, Depends(_api)]


def _error(status: int, message: str, type_: str | None = None) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(message=message, type=type_))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status)


def _unauthorised() -> JSONResponse:
    return _error(401, "invalid token", "auth")


def _not_ready() -> JSONResponse:
    return _error(503, "cache not ready", "unavailable")


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": what}
    for code, what in ((400, "bad request"), (401, "no internal token"), (503, "cache or Milvus not ready"))
}

router = APIRouter(prefix="/v1/cache")


@router.get("/stats", response_model=CacheStats, response_model_exclude_unset=True)
async def stats(api: Api) -> CacheStats:
    cache = api.stage.cache
    if cache is None:
        return CacheStats(ready=False)
    data = cache.stats.summary()
    data["entries"] = await asyncio.to_thread(cache.store.count)
    data["front_entries"] = len(cache.front)
    data["embeddings"] = {"batches": cache.embedder.batches, "reused": cache.embedder.reused}
    data["checks"] = cache.checks.summary()
    data["ready"] = True
    return CacheStats.model_validate(data)


@router.delete("/entries", response_model=Deleted, responses=ERRORS)
async def purge(
    req: Request,
    api: Api,
    tenant: str | None = None,
    model: str | None = None,
    adapter: str | None = None,
    entry_id: str | None = None,
) -> Deleted | JSONResponse:
    """Purge entries by tenant, model, adapter or entry id (at least one, none empty)."""
    if not api.authorised(req):
        return _unauthorised()
    cache = api.stage.cache
    if cache is None:
        return _not_ready()
    given = {"tenant": tenant, "model": model, "adapter": adapter, "entry_id": entry_id}
    fields = {k: v for k, v in given.items() if v is not None}
    if not fields:
        return _error(400, "name tenant, model, adapter or entry_id")
    if any(not v for v in fields.values()):
        return _error(400, "empty value for " + ", ".join(fields))
    ev = CachePurge(**fields)
    n = await cache.purge(purge_of(ev))
    cache.stats.invalidated += n
    if api.announce is not None:  # the other replicas' fronts (Milvus is done)
        await api.announce(ev)
    return Deleted(deleted=n)


def _floor_of(cache: SemanticCache, tenant: str) -> TenantFloorOut:
    p = cache.policy
    return TenantFloorOut(
        tenant=tenant,
        similarity_floor=p.floor_for(tenant),
        default=p.floor,
        target_error=p.target_for(tenant),
        default_target_error=p.target_error,
    )


@router.get("/tenants/{tenant}", response_model=TenantFloorOut, responses=ERRORS)
async def get_floor(tenant: str, api: Api) -> TenantFloorOut | JSONResponse:
    cache = api.stage.cache
    return _not_ready() if cache is None else _floor_of(cache, tenant)


async def _set_floors(
    api: CacheApi, cache: SemanticCache, floors: dict[str, float], targets: dict[str, float]
) -> None:
    objects, s = api.stage.objects, api.settings
    await objects.put(FLOORS_KEY, json.dumps(floors).encode(), "application/json")
    await objects.put(TARGETS_KEY, json.dumps(targets).encode(), "application/json")
    cache.policy.set_floors({**s.cache_tenant_floors, **floors})
    cache.policy.set_targets({**s.cache_tenant_targets, **targets})


@router.put(
    "/tenants/{tenant}",
    response_model=TenantFloorOut,
    responses=ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": TenantFloor.model_json_schema()}},
        }
    },
)
async def put_floor(tenant: str, req: Request, api: Api) -> TenantFloorOut | JSONResponse:
    """Set the tenant's similarity floor and/or target false-hit rate (kept in the object store,
    read by every replica)."""
    if not api.authorised(req):
        return _unauthorised()
    cache = api.stage.cache
    if cache is None:
        return _not_ready()
    try:
        body = TenantFloor.model_validate_json(await req.body())
    except ValidationError as exc:
        reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _error(400, reason, "invalid_request_error")
    if body.similarity_floor is None and body.target_error is None:
        return _error(400, "give similarity_floor, target_error or both", "invalid_request_error")
    floors = await load_floors(api.stage.objects)
    targets = await load_floors(api.stage.objects, TARGETS_KEY)
    if body.similarity_floor is not None:
        floors[tenant] = body.similarity_floor
    if body.target_error is not None:
        targets[tenant] = body.target_error
    await _set_floors(api, cache, floors, targets)
    return _floor_of(cache, tenant)


@router.delete("/tenants/{tenant}", response_model=TenantFloorOut, responses=ERRORS)
async def delete_floor(tenant: str, req: Request, api: Api) -> TenantFloorOut | JSONResponse:
    """Back to the default floor and target."""
    if not api.authorised(req):
        return _unauthorised()
    cache = api.stage.cache
    if cache is None:
        return _not_ready()
    floors = await load_floors(api.stage.objects)
    targets = await load_floors(api.stage.objects, TARGETS_KEY)
    floors.pop(tenant, None)
    targets.pop(tenant, None)
    await _set_floors(api, cache, floors, targets)
    return _floor_of(cache, tenant)


PEEK_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A hit of either tier: the answered switchyard.v1.Envelope",
        "content": {CONTENT_TYPE_PROTOBUF: {"schema": {"type": "string", "format": "binary"}}},
    },
    204: {
        "description": "A miss; the `x-cache-reason` header says why",
        "headers": {"x-cache-reason": {"schema": {"type": "string"}}},
    },
    **ERRORS,
}


@router.post("/peek", response_class=Response, responses=PEEK_RESPONSES)
async def peek(req: Request, api: Api) -> Response:
    """The lookup for the gateway, which sends each cacheable text request here before it
    produces it: 200 + the answered envelope on a hit of either tier, 204 + `x-cache-reason`
    otherwise. The stage then takes this outcome instead of looking again."""
    if not api.authorised(req):
        return _unauthorised()
    cache = api.stage.cache
    if cache is None:
        return Response(status_code=204, headers={"x-cache-reason": "not_ready"})
    t0 = time.time_ns()
    try:
        env = Envelope.FromString(await req.body())
    except DecodeError:
        return _error(400, "body is not a switchyard.v1.Envelope")
    try:
        out = await cache.peek(env)
    except Exception as exc:  # noqa: BLE001 - a failed peek is a miss: the pipeline answers
        log.warning("cache peek failed", error=repr(exc))
        return Response(status_code=204, headers={"x-cache-reason": "error"})
    if not out.hit:
        return Response(status_code=204, headers={"x-cache-reason": out.reason})
    shadow = api.stage.shadow_of(env, out)
    hit = cache.apply_hit(env, out, parent="cache_peek")
    add_timing(hit, "cache_peek", t0, time.time_ns())
    # A sampled hit's shadow is produced once the reply is out: the client never waits for it.
    later = BackgroundTask(api.stage.send_shadow, shadow) if shadow is not None else None
    return Response(hit.SerializeToString(), media_type=CONTENT_TYPE_PROTOBUF, background=later)


async def unavailable(_: Request, exc: Exception) -> Response:
    """Milvus or the object store is down: 503, so the caller retries (not a 500)."""
    log.warning("cache API call failed: dependency down", error=str(exc))
    return _error(503, str(exc), "unavailable")


def cache_app(settings: Settings, stage: CacheStage, announce: Announce | None = None) -> FastAPI:
    """The API over `stage`; `announce` publishes a purge for the other replicas."""
    app = rest_app(title="switchyard cache", exception_handlers={DependencyUnavailable: unavailable})
    app.state.cache_api = CacheApi(settings, stage, announce)
    app.include_router(router)
    return app
