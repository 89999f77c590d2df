"""What routes depend on (FastAPI `Depends`): the catalog and settings on app.state, and the caller's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from shared.runtime.admission import Admission
from shared.runtime.auth import bearer, is_internal, tenant_for_key
from shared.runtime.config import Settings

from .catalog import Catalog
from .names import TENANT_RE, RegistryError


def catalog_of(request: Request) -> Catalog:
    return request.app.state.catalog


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


async def tenant_of(
    request: Request,
    authorization: str | None = Header(default=None),
    x_switchyard_tenant: str | None = Header(default=None),
) -> str:
    """An API key's tenant (counted against its rate: 429), or the internal token acting for
    X-Switchyard-Tenant (the services' own lookups, counted where the tenant's request came in)."""
    settings: Settings = request.app.state.settings
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
    admission: Admission = request.app.state.admission
    await admission.request(tenant)
    return tenant


CatalogDep = Annotated[Catalog, Depends(catalog_of)]
SettingsDep = Annotated[Settings, Depends(settings_of)]
Tenant = Annotated[str, Depends(tenant_of)]
