"""An upload's multipart form into a published version: checks first, then the catalog."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import BinaryIO

from starlette.datastructures import FormData, UploadFile

from shared.adapters.registry_client import Manifest
from shared.runtime.config import Settings

from .catalog import Catalog
from .names import RegistryError, check_name
from .validate import check_upload, parse_adapter_config

FORM_OVERHEAD = 2 * 1024 * 1024  # adapter_config.json, the text fields and multipart framing


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


async def publish_form(form: FormData, tenant: str, settings: Settings, catalog: Catalog) -> Manifest:
    """Publish a new version from the form (name, visibility, aliases, base_model; two files)."""
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
