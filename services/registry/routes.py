"""The registry's REST routes: each reads its request, asks the catalog, and answers a model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response
from fastapi import Path as FastApiPath
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from shared.adapters.registry_client import Adapter, Manifest
from shared.runtime.telemetry import get_logger

from .deps import CatalogDep, SettingsDep, Tenant
from .errors import error_responses
from .names import RegistryError
from .uploads import publish_form

log = get_logger(__name__)

MAX_VERSION = 2**31 - 1  # versions are int32 on the wire (AdapterEvent, AdapterRef)
# A version in a path: out of range is 400, never a 5xx from the protobuf or the store.
Version = Annotated[int, FastApiPath(ge=1, le=MAX_VERSION)]


class AliasBody(BaseModel):
    model_config = {"extra": "forbid"}
    version: int = Field(ge=1, le=MAX_VERSION)


class AdapterList(BaseModel):
    object: str = "list"
    data: list[Adapter]


# A file's bytes: the safetensors model, or the adapter's JSON config.
FILE_RESPONSE = {
    200: {
        "description": "The file (X-Sha256 names its digest)",
        "content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "application/json": {"schema": {"type": "object"}},
        },
    }
}

# Every route may answer these as an ErrorBody (a malformed request is a 400, never FastAPI's 422 shape).
router = APIRouter(prefix="/v1", responses=error_responses(400, 401, 403, 404, 422, 429))


@router.post("/adapters", status_code=201, response_model=Manifest, responses=error_responses(409, 413))
async def upload(request: Request, tenant: Tenant, settings: SettingsDep, catalog: CatalogDep) -> Manifest:
    """Publish a new version (multipart: name, visibility, aliases, base_model; two files)."""
    form = await request.form(max_files=2, max_fields=8)
    try:
        return await publish_form(form, tenant, settings, catalog)
    except RegistryError as exc:
        log.info("adapter upload refused", tenant=tenant, reason=exc.message, code=exc.code)
        raise
    finally:
        await form.close()


@router.get("/adapters", response_model=AdapterList)
async def list_adapters(tenant: Tenant, catalog: CatalogDep) -> AdapterList:
    """Adapters the tenant may use: its own and public ones."""
    return AdapterList(data=catalog.visible(tenant))


@router.get("/adapters/{name}", response_model=Adapter)
async def get_adapter(name: str, tenant: Tenant, catalog: CatalogDep) -> Adapter:
    return catalog.get(tenant, name)


@router.get("/adapters/{name}/versions/{version}", response_model=Manifest)
async def get_version(name: str, version: Version, tenant: Tenant, catalog: CatalogDep) -> Manifest:
    return catalog.version(tenant, name, version)


@router.get("/resolve", response_model=Manifest)
async def resolve(ref: str, tenant: Tenant, catalog: CatalogDep) -> Manifest:
    """The manifest `ref` pins: name (= name@latest), name@N or name@alias."""
    return catalog.resolve(tenant, ref)


@router.get(
    "/adapters/{name}/versions/{version}/files/{filename}",
    response_class=StreamingResponse,
    responses=FILE_RESPONSE,
)
async def download(
    name: str, version: Version, filename: str, tenant: Tenant, catalog: CatalogDep
) -> StreamingResponse:
    m, chunks = await catalog.open_file(tenant, name, version, filename)
    is_model = filename == "adapter_model.safetensors"
    headers = {"X-Sha256": m.sha256 if is_model else m.config_sha256}
    if is_model:
        headers["Content-Length"] = str(m.size_bytes)
    media = "application/octet-stream" if is_model else "application/json"
    return StreamingResponse(chunks, media_type=media, headers=headers)


@router.put("/adapters/{name}/aliases/{alias}", response_model=Manifest, responses=error_responses(409))
async def set_alias(name: str, alias: str, body: AliasBody, tenant: Tenant, catalog: CatalogDep) -> Manifest:
    """Point an alias at a version (one state write: readers see the old or the new target)."""
    return await catalog.set_alias(tenant, name, alias, body.version)


@router.delete("/adapters/{name}/aliases/{alias}", status_code=204, response_class=Response)
async def delete_alias(name: str, alias: str, tenant: Tenant, catalog: CatalogDep) -> Response:
    await catalog.delete_alias(tenant, name, alias)
    return Response(status_code=204)


@router.delete("/adapters/{name}/versions/{version}", status_code=204, response_class=Response)
async def delete_version(name: str, version: Version, tenant: Tenant, catalog: CatalogDep) -> Response:
    await catalog.delete_version(tenant, name, version)
    return Response(status_code=204)


@router.delete("/adapters/{name}", status_code=204, response_class=Response)
async def delete_adapter(name: str, tenant: Tenant, catalog: CatalogDep) -> Response:
    await catalog.delete_adapter(tenant, name)
    return Response(status_code=204)
