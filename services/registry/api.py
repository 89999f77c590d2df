"""The registry's REST API (FastAPI): auth, upload parsing, and the catalog's answers as JSON."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Annotated, Any, BinaryIO

from fastapi import Depends, FastAPI, Header, Request, Response
from fastapi import Path as FastApiPath
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.adapters.registry_client import Adapter, Manifest
from shared.openai.errors import error_response as openai_error
from shared.runtime.admission import Admission, Refused
from shared.runtime.auth import bearer, is_internal, tenant_for_key
from shared.runtime.config import Settings
from shared.runtime.telemetry import get_logger

from .catalog import Catalog
from .validate import TENANT_RE, RegistryError, check_name, check_upload, parse_adapter_config

log = get_logger(__name__)

FORM_OVERHEAD = 2 * 1024 * 1024  # adapter_config.json, the text fields and multipart framing


def error_response(
    status: int, message: str, code: str, param: str | None = None, retry_after: int | None = None
) -> JSONResponse:
    """A 429 always says when to retry (Retry-After)."""
    if status == 429 and retry_after is None:
        retry_after = 30
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return openai_error("registry", status, message, code, param, headers)


class UploadLimit:
    """413 while the upload is still arriving, so an oversize body is never fully received."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        too_big = RegistryError(413, f"upload exceeds {self.limit} bytes", "too_large", "adapter_model")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await error_response(413, too_big.message, too_big.code, too_big.param)(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise too_big
            return msg

        await self.app(scope, limited, send)


MAX_VERSION = 2**31 - 1  # versions are int32 on the wire (AdapterEvent, AdapterRef)
# A version in a path: out of range is 400, never a 5xx from the protobuf or the store.
Version = Annotated[int, FastApiPath(ge=1, le=MAX_VERSION)]


class AliasBody(BaseModel):
    model_config = {"extra": "forbid"}
    version: int = Field(ge=1, le=MAX_VERSION)


class AdapterList(BaseModel):
    object: str = "list"
    data: list[Adapter]


def _hash_and_size(f: BinaryIO) -> tuple[str, int]:
    f.seek(0)
    h, size = hashlib.sha256(), 0
    while block := f.read(1 << 20):
        h.update(block)
        size += len(block)
    f.seek(0)
    return h.hexdigest(), size


async def _file_chunks(f: BinaryIO) -> AsyncIterator[bytes]:
    f.seek(0)
    while block := await asyncio.to_thread(f.read, 1 << 20):
        yield block


def create_app(settings: Settings, catalog: Catalog) -> ASGIApp:
    app = FastAPI(
        title="Switchyard adapter registry",
        version="0.1.0",
        description="LoRA adapters: upload, versions, aliases, tenant visibility",
    )

    @app.exception_handler(RegistryError)
    async def _refused(_: Request, exc: RegistryError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, exc.param)

    @app.exception_handler(Refused)
    async def _limited(_: Request, exc: Refused) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, retry_after=exc.retry_after)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(x) for x in first["loc"] if x not in ("body", "path", "query")) or None
        msg = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'] if x not in ('body', 'path', 'query'))}: {e['msg']}"
            for e in errs[:5]
        )
        return error_response(400, msg, "invalid_request", param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(
            exc.status_code, str(exc.detail), "not_found" if exc.status_code == 404 else "http_error"
        )

    admission = Admission(settings)

    async def tenant_of(
        authorization: str | None = Header(default=None),
        x_switchyard_tenant: str | None = Header(default=None),
    ) -> str:
        """An API key's tenant (counted against its rate: 429), or the internal token acting for
        X-Switchyard-Tenant (the services' own lookups, counted where the tenant's request came in)."""
        key = bearer(authorization)
        if key is None:
            raise RegistryError(401, "missing API key: send 'Authorization: Bearer <key>'", "invalid_api_key")
        if is_internal(settings, authorization):
            if not x_switchyard_tenant or not TENANT_RE.fullmatch(x_switchyard_tenant):
                raise RegistryError(
                    401, "the internal token needs a valid X-Switchyard-Tenant header", "invalid_api_key"
                )
            return x_switchyard_tenant
        tenant = tenant_for_key(settings.api_keys, key)
        if tenant is None:
            raise RegistryError(401, "invalid API key", "invalid_api_key")
        await admission.request(tenant)
        return tenant

    @app.post("/v1/adapters", status_code=201, response_model=Manifest)
    async def upload(request: Request, tenant: str = Depends(tenant_of)) -> Manifest:
        """Publish a new version (multipart: name, visibility, aliases, base_model; two files)."""
        form = await request.form(max_files=2, max_fields=8)
        try:
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            name = check_name(fields.get("name", ""))
            catalog.check_can_publish(tenant, name, settings.tenant_max_adapters)
            model, config = form.get("adapter_model"), form.get("adapter_config")
            if not isinstance(model, UploadFile):
                raise RegistryError(400, "missing file 'adapter_model'", "missing_file", "adapter_model")
            if not isinstance(config, UploadFile):
                raise RegistryError(400, "missing file 'adapter_config'", "missing_file", "adapter_config")
            config_raw = await config.read(2 * 1024 * 1024)
            parse_adapter_config(config_raw)  # size and shape of the config, before hashing the model
            sha, size = await asyncio.to_thread(_hash_and_size, model.file)
            checked = await asyncio.to_thread(
                check_upload,
                settings,
                model.file,
                size,
                model.filename,
                config_raw,
                fields.get("base_model") or None,
            )
            aliases = [a.strip() for a in fields.get("aliases", "").split(",") if a.strip()]
            return await catalog.publish(
                tenant,
                name,
                checked,
                _file_chunks(model.file),
                sha,
                config_raw,
                visibility=fields.get("visibility") or None,
                aliases=aliases,
            )
        except RegistryError as exc:
            log.info("adapter upload refused", tenant=tenant, reason=exc.message, code=exc.code)
            raise
        finally:
            await form.close()

    @app.get("/v1/adapters", response_model=AdapterList)
    async def list_adapters(tenant: str = Depends(tenant_of)) -> AdapterList:
        """Adapters the tenant may use: its own and public ones."""
        return AdapterList(data=catalog.visible(tenant))

    @app.get("/v1/adapters/{name}", response_model=Adapter)
    async def get_adapter(name: str, tenant: str = Depends(tenant_of)) -> Adapter:
        return catalog.get(tenant, name)

    @app.get("/v1/adapters/{name}/versions/{version}", response_model=Manifest)
    async def get_version(name: str, version: Version, tenant: str = Depends(tenant_of)) -> Manifest:
        return catalog.version(tenant, name, version)

    @app.get("/v1/resolve", response_model=Manifest)
    async def resolve(ref: str, tenant: str = Depends(tenant_of)) -> Manifest:
        """The manifest `ref` pins: name (= name@latest), name@N or name@alias."""
        return catalog.resolve(tenant, ref)

    @app.get("/v1/adapters/{name}/versions/{version}/files/{filename}")
    async def download(name: str, version: Version, filename: str, tenant: str = Depends(tenant_of)) -> Any:
        m, chunks = await catalog.open_file(tenant, name, version, filename)
        is_model = filename == "adapter_model.safetensors"
        headers = {"X-Sha256": m.sha256 if is_model else m.config_sha256}
        if is_model:
            headers["Content-Length"] = str(m.size_bytes)
        media = "application/octet-stream" if is_model else "application/json"
        return StreamingResponse(chunks, media_type=media, headers=headers)

    @app.put("/v1/adapters/{name}/aliases/{alias}", response_model=Manifest)
    async def set_alias(name: str, alias: str, body: AliasBody, tenant: str = Depends(tenant_of)) -> Manifest:
        """Point an alias at a version (one state write: readers see the old or the new target)."""
        return await catalog.set_alias(tenant, name, alias, body.version)

    @app.delete("/v1/adapters/{name}/aliases/{alias}", status_code=204)
    async def delete_alias(name: str, alias: str, tenant: str = Depends(tenant_of)) -> Response:
        await catalog.delete_alias(tenant, name, alias)
        return Response(status_code=204)

    @app.delete("/v1/adapters/{name}/versions/{version}", status_code=204)
    async def delete_version(name: str, version: Version, tenant: str = Depends(tenant_of)) -> Response:
        await catalog.delete_version(tenant, name, version)
        return Response(status_code=204)

    @app.delete("/v1/adapters/{name}", status_code=204)
    async def delete_adapter(name: str, tenant: str = Depends(tenant_of)) -> Response:
        await catalog.delete_adapter(tenant, name)
        return Response(status_code=204)

    return UploadLimit(app, settings.adapter_max_bytes + FORM_OVERHEAD)
