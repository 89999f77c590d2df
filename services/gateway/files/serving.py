"""OpenAI Files: batch input files kept in the object store (shared/batches/store.py)."""

from __future__ import annotations

from typing import Any

from fastapi import UploadFile

from shared.batches.store import BatchStore
from shared.runtime.config import Settings
from shared.runtime.telemetry import get_logger

from ..errors import ApiError

log = get_logger(__name__)


def _missing(file_id: str, param: str = "file_id") -> ApiError:
    return ApiError(404, f"No such File object: {file_id}", "not_found", param)


class FileServing:
    def __init__(self, settings: Settings, store: BatchStore) -> None:
        self.settings, self.store = settings, store
        self.max_file = min(settings.batch_file_max_bytes, settings.gateway_max_body_bytes)

    def _check(self, data: bytes) -> int:
        """The file's line count, once it is within the limits, not empty and UTF-8."""
        if len(data) > self.max_file:
            raise ApiError(413, f"file exceeds {self.max_file} bytes", "file_too_large", "file")
        if not data.strip():
            raise ApiError(400, "file is empty", "empty_file", "file")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApiError(400, f"file is not UTF-8 (byte {exc.start})", "invalid_encoding", "file") from None
        lines = sum(1 for line in data.splitlines() if line.strip())
        if lines > self.settings.batch_file_max_lines:
            raise ApiError(
                400,
                f"file has {lines} lines, limit SY_BATCH_FILE_MAX_LINES={self.settings.batch_file_max_lines}",
                "too_many_lines",
                "file",
            )
        return lines

    async def create(self, file: UploadFile, purpose: str, tenant: str) -> dict[str, Any]:
        """Upload a JSONL batch input file (purpose `batch`)."""
        if purpose != "batch":
            raise ApiError(
                400, f"purpose must be 'batch', got {purpose[:40]!r}", "invalid_purpose", "purpose"
            )
        data = await file.read(self.max_file + 1)
        lines = self._check(data)
        if await self.store.count_files(tenant) >= self.settings.tenant_max_files:
            # A tenant's quota of kept files is full: 429, retry once some are deleted.
            raise ApiError(
                429,
                f"this tenant keeps {self.settings.tenant_max_files} files already (SY_TENANT_MAX_FILES): "
                "delete some first",
                "too_many_files",
                headers={"Retry-After": "30"},
            )
        name = (file.filename or "input.jsonl").rsplit("/", 1)[-1][:200]
        meta = await self.store.put_file(tenant, name, purpose, data)
        log.info("file stored", file_id=meta.id, tenant=tenant, bytes=meta.bytes, lines=lines)
        return meta.model_dump()

    async def list(self, tenant: str) -> dict[str, Any]:
        files = await self.store.list_files(tenant)
        return {"object": "list", "data": [f.model_dump() for f in files], "has_more": False}

    async def get(self, file_id: str, tenant: str) -> dict[str, Any]:
        meta = await self.store.get_file(tenant, file_id)
        if meta is None:
            raise _missing(file_id)
        return meta.model_dump()

    async def content(self, file_id: str, tenant: str) -> bytes:
        """The bytes of an input, output or error file."""
        data = await self.store.file_content(tenant, file_id)
        if data is None:
            raise _missing(file_id)
        return data

    async def delete(self, file_id: str, tenant: str) -> dict[str, Any]:
        if not await self.store.delete_file(tenant, file_id):
            raise _missing(file_id)
        return {"id": file_id, "object": "file", "deleted": True}
