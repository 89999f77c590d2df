"""Client of the adapter registry for services (workers, cache), and the shapes it returns.

Services call the registry on a tenant's behalf with the internal token plus
`X-Switchyard-Tenant`, so the registry applies that tenant's visibility rules. The `Manifest`
model is defined here once; the registry's API serves exactly this shape.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, Field

from shared.runtime.config import Settings
from shared.runtime.envelope import DependencyUnavailable
from shared.runtime.outages import REGISTRY
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

TENANT_HEADER = "X-Switchyard-Tenant"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")


class Manifest(BaseModel):
    """One immutable adapter version (`aliases`, `owner`, `visibility` are the current state)."""

    name: str
    version: int = Field(ge=1)
    owner: str
    visibility: Literal["private", "public"]
    sha256: str  # adapter_model.safetensors
    size_bytes: int
    config_sha256: str  # adapter_config.json
    rank: int
    alpha: float
    target_modules: list[str]
    base_model: str
    created_unix_ns: int
    aliases: list[str] = Field(default_factory=list)


class Adapter(BaseModel):
    """An adapter with its live versions (oldest first) and its aliases (alias → version)."""

    name: str
    owner: str
    visibility: Literal["private", "public"]
    versions: list[Manifest]
    aliases: dict[str, int]


class RegistryError(RuntimeError):
    """The registry refused or failed a call; `status` is its HTTP status (0: no answer, for a
    reason other than an outage: those raise DependencyUnavailable, see `_DOWN_ERRORS`)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ChecksumMismatch(RegistryError):
    """A downloaded file's sha256 differs from the manifest's: nothing is left at dest."""


def _error_message(r: httpx.Response) -> str:
    try:
        return str(r.json()["error"]["message"])
    except Exception:  # noqa: BLE001 - any non-OpenAI body
        return r.text[:200]


# The registry is down, not the request wrong (issue 32): it cannot be reached, timed out, dropped
# the connection, or the proxy before it answered 502/503/504. These raise DependencyUnavailable,
# which the bus waits out instead of dead-lettering. A 404 (unknown or invisible adapter: None or
# RegistryError(404), so ADAPTER_NOT_FOUND) and every other refusal stay as they were.
_DOWN_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_DOWN_STATUS = frozenset({502, 503, 504})


def _raise_if_down(r: httpx.Response, what: str) -> None:
    if r.status_code in _DOWN_STATUS:
        raise DependencyUnavailable(REGISTRY, f"{what}: HTTP {r.status_code} {_error_message(r)}"[:500])


class RegistryClient:
    def __init__(
        self,
        settings: Settings,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self._token = settings.internal_token.get_secret_value()
        self._http = httpx.AsyncClient(
            base_url=settings.registry_url.rstrip("/"), transport=transport, timeout=timeout_s
        )

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}", TENANT_HEADER: tenant}

    async def _get(self, tenant: str, path: str, **params: str) -> httpx.Response:
        try:
            r = await self._http.get(path, params=params or None, headers=self._headers(tenant))
        except _DOWN_ERRORS as exc:
            raise DependencyUnavailable(REGISTRY, f"GET {path}: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise RegistryError(f"registry unreachable: {exc!r}") from exc
        _raise_if_down(r, f"GET {path}")
        return r

    async def resolve(self, tenant: str, ref: str) -> Manifest | None:
        """The manifest `ref` (name, name@N, name@alias) pins for the tenant; None when unknown."""
        r = await self._get(tenant, "/v1/resolve", ref=ref)
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise RegistryError(f"resolve {ref!r}: {_error_message(r)}", r.status_code)
        return Manifest.model_validate(r.json())

    async def list_visible(self, tenant: str) -> list[Adapter]:
        """Adapters the tenant may use: its own and public ones."""
        r = await self._get(tenant, "/v1/adapters")
        if r.status_code != 200:
            raise RegistryError(f"list adapters: {_error_message(r)}", r.status_code)
        return [Adapter.model_validate(a) for a in r.json()["data"]]

    async def download(
        self, tenant: str, name: str, version: int, filename: str, dest: Path, expected_sha256: str
    ) -> Path:
        """Stream one file of a version to `dest`, verified against `expected_sha256`.

        Writes a temp file beside dest and renames it only after the hash matched, so dest
        is either absent or complete and correct.
        """
        if filename not in ADAPTER_FILES:
            raise ValueError(f"filename must be one of {ADAPTER_FILES}, got {filename!r}")
        dest = Path(dest)
        await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
        tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex}"
        url = f"/v1/adapters/{name}/versions/{version}/files/{filename}"
        h = hashlib.sha256()
        try:
            async with self._http.stream("GET", url, headers=self._headers(tenant)) as r:
                if r.status_code != 200:
                    await r.aread()
                    _raise_if_down(r, f"download {name}@{version}/{filename}")
                    raise RegistryError(
                        f"download {name}@{version}/{filename}: {_error_message(r)}", r.status_code
                    )
                f = await asyncio.to_thread(open, tmp, "wb")
                try:
                    async for block in r.aiter_bytes(1 << 20):
                        h.update(block)
                        await asyncio.to_thread(f.write, block)
                    await asyncio.to_thread(f.flush)
                    await asyncio.to_thread(os.fsync, f.fileno())
                finally:
                    await asyncio.to_thread(f.close)
            got = h.hexdigest()
            if got != expected_sha256:
                raise ChecksumMismatch(
                    f"download {name}@{version}/{filename}: sha256 {got} != expected {expected_sha256}"
                )
            await asyncio.to_thread(os.replace, tmp, dest)
        except _DOWN_ERRORS as exc:
            raise DependencyUnavailable(REGISTRY, f"download {name}@{version}/{filename}: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise RegistryError(f"download {name}@{version}/{filename}: {exc!r}") from exc
        finally:
            await asyncio.to_thread(tmp.unlink, missing_ok=True)
        log.info("adapter file downloaded", adapter=name, version=version, file=filename)
        return dest
