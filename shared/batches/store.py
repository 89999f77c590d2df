"""Files and batch jobs in object storage, in OpenAI's Files/Batches shapes.

The gateway and the batch service share this layout (they never import each other):

    files/<tenant>/<file_id>/content          uploaded or produced JSONL
    files/<tenant>/<file_id>/meta.json        the FileObject
    batches/<tenant>/<batch_id>.json          the BatchObject (written by the gateway once,
                                              then only by the job's lease holder)
    batch-active/<batch_id>.json              {"tenant": ...} while the job is not final
    batch-work/<batch_id>/cancel              cancel requested (the gateway writes it)
    batch-work/<batch_id>/lease.json          which worker runs the job, until when
    batch-work/<batch_id>/lines.jsonl         validated lines; invalid.jsonl: line errors
    batch-work/<batch_id>/progress.json       how many valid lines were sent
    batch-work/<batch_id>/results/*.jsonl     collected answers (appended in chunks)

Tenants are in the keys of files and batches, so another tenant's id simply is not found.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from shared.runtime.storage import ObjectNotFound, ObjectStore

TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def new_batch_id() -> str:
    return f"batch_{secrets.token_hex(12)}"


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: str = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class RequestCounts(BaseModel):
    total: int = 0
    completed: int = 0
    failed: int = 0


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: dict[str, Any] | None = None
    input_file_id: str
    completion_window: str
    status: BatchStatus = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts = Field(default_factory=RequestCounts)
    metadata: dict[str, str] | None = None


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(_json(r) + b"\n" for r in rows)


def read_jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


class BatchStore:
    """Typed access to the layout above on any ObjectStore (LocalStore or S3Store)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    # ---------------------------------------------------------------- files
    async def put_file(
        self, tenant: str, filename: str, purpose: str, data: bytes, file_id: str | None = None
    ) -> FileObject:
        fid = file_id or new_file_id()
        await self.store.put(f"files/{tenant}/{fid}/content", data, "application/jsonl")
        meta = FileObject(
            id=fid, bytes=len(data), created_at=int(time.time()), filename=filename, purpose=purpose
        )
        await self.store.put(f"files/{tenant}/{fid}/meta.json", _json(meta.model_dump()), "application/json")
        return meta

    async def get_file(self, tenant: str, file_id: str) -> FileObject | None:
        try:
            return FileObject.model_validate_json(await self.store.get(f"files/{tenant}/{file_id}/meta.json"))
        except (ObjectNotFound, ValueError):
            return None

    async def file_content(self, tenant: str, file_id: str) -> bytes | None:
        try:
            return await self.store.get(f"files/{tenant}/{file_id}/content")
        except (ObjectNotFound, ValueError):
            return None

    async def count_files(self, tenant: str) -> int:
        """How many files the tenant keeps (its quota), from the listing alone."""
        return sum(1 for info in await self.store.list(f"files/{tenant}/") if info.key.endswith("/meta.json"))

    async def list_files(self, tenant: str) -> list[FileObject]:
        out = []
        for info in await self.store.list(f"files/{tenant}/"):
            if info.key.endswith("/meta.json"):
                out.append(FileObject.model_validate_json(await self.store.get(info.key)))
        return sorted(out, key=lambda f: (f.created_at, f.id), reverse=True)

    async def delete_file(self, tenant: str, file_id: str) -> bool:
        """False when there is no such file (an id that cannot be a key is no file either)."""
        try:
            return await self.store.delete_prefix(f"files/{tenant}/{file_id}/") > 0
        except ValueError:
            return False

    # ---------------------------------------------------------------- batches
    async def put_batch(self, tenant: str, batch: BatchObject) -> None:
        await self.store.put(
            f"batches/{tenant}/{batch.id}.json", _json(batch.model_dump()), "application/json"
        )
        if batch.status in TERMINAL:
            await self.store.delete(f"batch-active/{batch.id}.json")
        else:
            await self.store.put(f"batch-active/{batch.id}.json", _json({"tenant": tenant}))

    async def get_batch(self, tenant: str, batch_id: str) -> BatchObject | None:
        try:
            return BatchObject.model_validate_json(await self.store.get(f"batches/{tenant}/{batch_id}.json"))
        except (ObjectNotFound, ValueError):
            return None

    async def list_batches(self, tenant: str) -> list[BatchObject]:
        out = []
        for info in await self.store.list(f"batches/{tenant}/"):
            try:
                out.append(BatchObject.model_validate_json(await self.store.get(info.key)))
            except (ObjectNotFound, ValueError):
                continue
        return sorted(out, key=lambda b: (b.created_at, b.id), reverse=True)

    async def active(self) -> list[tuple[str, str]]:
        """(tenant, batch_id) of every job not final yet."""
        out = []
        for info in await self.store.list("batch-active/"):
            try:
                tenant = json.loads(await self.store.get(info.key))["tenant"]
            except (ObjectNotFound, ValueError, KeyError):
                continue
            out.append((tenant, info.key.rsplit("/", 1)[1].removesuffix(".json")))
        return out

    # ---------------------------------------------------------------- job control
    def _work(self, batch_id: str, name: str) -> str:
        return f"batch-work/{batch_id}/{name}"

    async def request_cancel(self, batch_id: str) -> None:
        await self.store.put(self._work(batch_id, "cancel"), _json({"at": int(time.time())}))

    async def cancel_requested(self, batch_id: str) -> int | None:
        try:
            return int(json.loads(await self.store.get(self._work(batch_id, "cancel")))["at"])
        except (ObjectNotFound, ValueError, KeyError):
            return None

    async def lease(self, batch_id: str) -> dict[str, Any] | None:
        try:
            return json.loads(await self.store.get(self._work(batch_id, "lease.json")))
        except (ObjectNotFound, ValueError):
            return None

    async def write_lease(self, batch_id: str, owner: str, ttl_s: float) -> None:
        await self.store.put(
            self._work(batch_id, "lease.json"), _json({"owner": owner, "until": time.time() + ttl_s})
        )

    async def release_lease(self, batch_id: str, owner: str) -> None:
        held = await self.lease(batch_id)
        if held and held.get("owner") == owner:
            await self.store.delete(self._work(batch_id, "lease.json"))

    async def put_work(self, batch_id: str, name: str, data: bytes) -> None:
        await self.store.put(self._work(batch_id, name), data)

    async def get_work(self, batch_id: str, name: str) -> bytes | None:
        try:
            return await self.store.get(self._work(batch_id, name))
        except ObjectNotFound:
            return None

    async def add_results(self, batch_id: str, chunk_name: str, rows: list[dict[str, Any]]) -> str:
        key = self._work(batch_id, f"results/{chunk_name}.jsonl")
        await self.store.put(key, jsonl(rows))
        return key

    async def result_chunks(self, batch_id: str) -> list[str]:
        return [i.key for i in await self.store.list(self._work(batch_id, "results/"))]

    async def read_key(self, key: str) -> bytes:
        return await self.store.get(key)

    async def delete_key(self, key: str) -> None:
        await self.store.delete(key)
