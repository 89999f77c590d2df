"""What every object store shares: keys, object metadata, the interface, and the data a put takes."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from shared.runtime.storage.errors import SOURCE_NOTE

Data = bytes | AsyncIterator[bytes] | Path | str
"""What `put` accepts: the bytes, an async stream of chunks, or the path of a local file."""

MAX_KEY_BYTES = 1024
RESERVED = ".sy-"  # path segments starting with this are the stores' own (sidecars, temp files)
CHUNK = 1 << 20


class ObjectNotFound(KeyError):
    """`get`/`stream` of a key that does not exist."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    sha256: str
    etag: str = ""
    mtime: float = 0.0
    content_type: str = "application/octet-stream"


def validate_key(key: str) -> str:
    """Refuse keys that could escape the store root or confuse listings (ValueError)."""
    if not isinstance(key, str) or not key:
        raise ValueError("object key must be a non-empty string")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"object key longer than {MAX_KEY_BYTES} bytes")
    if key.startswith("/"):
        raise ValueError(f"object key must not start with '/': {key!r}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise ValueError(f"object key contains a control character: {key!r}")
    if "\\" in key:
        raise ValueError(f"object key contains a backslash: {key!r}")
    for seg in key.split("/"):
        if seg in ("", ".", ".."):
            raise ValueError(f"object key has an empty, '.' or '..' segment: {key!r}")
        if seg.startswith(RESERVED):
            raise ValueError(f"object key segment {seg!r} uses the reserved prefix {RESERVED!r}")
    return key


def validate_prefix(prefix: str) -> str:
    """A prefix is a key start: '' (everything), 'a/b/' or 'a/b' (also matches 'a/bc')."""
    if prefix == "":
        return prefix
    validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


@runtime_checkable
class ObjectStore(Protocol):
    async def put(
        self, key: str, data: Data, content_type: str = "application/octet-stream"
    ) -> ObjectInfo: ...

    async def get(self, key: str) -> bytes: ...

    def stream(self, key: str, chunk: int = CHUNK) -> AsyncIterator[bytes]: ...

    async def stat(self, key: str) -> ObjectInfo | None: ...

    async def list(self, prefix: str = "") -> list[ObjectInfo]: ...

    async def delete(self, key: str) -> None: ...

    async def delete_prefix(self, prefix: str) -> int: ...


async def chunks(data: Data, chunk: int = CHUNK) -> AsyncIterator[bytes]:
    """Any `Data` as an async stream of chunks (files are read off the event loop). An error of
    the source is noted as such: a caller's file or upload failing is no outage of the store."""
    try:
        if isinstance(data, bytes | bytearray | memoryview):
            yield bytes(data)
            return
        if isinstance(data, Path | str):
            f = await asyncio.to_thread(open, data, "rb")
            try:
                while block := await asyncio.to_thread(f.read, chunk):
                    yield block
            finally:
                await asyncio.to_thread(f.close)
            return
        async for block in data:
            yield bytes(block)
    except Exception as exc:
        exc.add_note(SOURCE_NOTE)
        raise


async def spool(data: Data, f: BinaryIO) -> tuple[int, str]:
    """Write data into an open file while hashing it; returns (size, sha256)."""
    h, size = hashlib.sha256(), 0
    async for block in chunks(data):
        h.update(block)
        size += len(block)
        await asyncio.to_thread(f.write, block)
    await asyncio.to_thread(f.flush)
    return size, h.hexdigest()


DEFAULT_CT = "application/octet-stream"


def hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()
