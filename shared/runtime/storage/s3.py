"""Object storage in an S3 bucket (MinIO or any S3), through the minio client."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from shared.runtime.storage.errors import outages, s3_outage
from shared.runtime.storage.objects import (
    CHUNK,
    DEFAULT_CT,
    Data,
    ObjectInfo,
    ObjectNotFound,
    hash_file,
    spool,
    validate_key,
    validate_prefix,
)
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


SHA_META = "x-amz-meta-sha256"
_MISSING = {"NoSuchKey", "NoSuchObject", "ResourceNotFound", "NotFound"}


class S3Store:
    """Objects in one S3 bucket through the (synchronous) minio client, run in threads.

    S3 puts are atomic per object. Streams are spooled to a local temp file while hashing, so
    the sha256 travels as `x-amz-meta-sha256` user metadata of the same put (S3 cannot add
    metadata after the bytes) and the length is known up front.
    """

    def __init__(
        self,
        endpoint: str,
        bucket: str,
        access_key: str | None = None,
        secret_key: str | None = None,
        secure: bool = False,
        region: str | None = None,
    ) -> None:
        from minio import Minio

        self.bucket = bucket
        self.client = Minio(
            endpoint, access_key=access_key, secret_key=secret_key, secure=secure, region=region
        )
        self._bucket_ready = False
        self._bucket_lock = asyncio.Lock()

    async def _ready(self) -> None:
        if self._bucket_ready:
            return
        async with self._bucket_lock:
            if not self._bucket_ready:
                await asyncio.to_thread(self._ensure_bucket)
                self._bucket_ready = True

    def _ensure_bucket(self) -> None:
        from minio.error import S3Error

        if self.client.bucket_exists(self.bucket):
            return
        try:
            self.client.make_bucket(self.bucket)
            log.info("bucket created", bucket=self.bucket)
        except S3Error as exc:  # created meanwhile by another process
            if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    @staticmethod
    def _missing(exc: Exception) -> bool:
        from minio.error import S3Error

        return isinstance(exc, S3Error) and (exc.code in _MISSING or exc.response.status == 404)

    @outages(s3_outage)
    async def put(self, key: str, data: Data, content_type: str = "application/octet-stream") -> ObjectInfo:
        validate_key(key)
        await self._ready()
        if isinstance(data, bytes | bytearray | memoryview):
            raw = bytes(data)
            sha = hashlib.sha256(raw).hexdigest()
            res = await asyncio.to_thread(
                self.client.put_object,
                self.bucket,
                key,
                io.BytesIO(raw),
                len(raw),
                content_type=content_type,
                metadata={SHA_META: sha},
            )
            return ObjectInfo(key, len(raw), sha, res.etag or "", time.time(), content_type)
        if isinstance(data, Path | str):
            path = str(data)
            size = (await asyncio.to_thread(os.stat, path)).st_size
            sha = await asyncio.to_thread(hash_file, Path(path))
            return await self._fput(key, path, size, sha, content_type)
        f = await asyncio.to_thread(tempfile.NamedTemporaryFile, prefix="sy-spool-", delete=False)
        try:
            try:
                size, sha = await spool(data, f)
            finally:
                await asyncio.to_thread(f.close)
            return await self._fput(key, f.name, size, sha, content_type)
        finally:
            await asyncio.to_thread(Path(f.name).unlink, missing_ok=True)

    async def _fput(self, key: str, path: str, size: int, sha: str, content_type: str) -> ObjectInfo:
        res = await asyncio.to_thread(
            self.client.fput_object,
            self.bucket,
            key,
            path,
            content_type=content_type,
            metadata={SHA_META: sha},
        )
        return ObjectInfo(key, size, sha, res.etag or "", time.time(), content_type)

    async def get(self, key: str) -> bytes:
        return b"".join([b async for b in self.stream(key)])

    @outages(s3_outage)
    async def stream(self, key: str, chunk: int = CHUNK) -> AsyncIterator[bytes]:
        validate_key(key)
        await self._ready()
        try:
            resp = await asyncio.to_thread(self.client.get_object, self.bucket, key)
        except Exception as exc:
            if self._missing(exc):
                raise ObjectNotFound(key) from None
            raise
        try:
            it: Iterator[bytes] = resp.stream(chunk)
            while block := await asyncio.to_thread(next, it, b""):
                yield block
        finally:
            resp.close()
            resp.release_conn()

    def _stat_sync(self, key: str) -> ObjectInfo | None:
        try:
            st = self.client.stat_object(self.bucket, key)
        except Exception as exc:
            if self._missing(exc):
                return None
            raise
        meta = {k.lower(): v for k, v in (st.metadata or {}).items()}
        return ObjectInfo(
            key=key,
            size=int(st.size or 0),
            sha256=str(meta.get(SHA_META, "")),
            etag=st.etag or "",
            mtime=st.last_modified.timestamp() if st.last_modified else 0.0,
            content_type=st.content_type or DEFAULT_CT,
        )

    @outages(s3_outage)
    async def stat(self, key: str) -> ObjectInfo | None:
        validate_key(key)
        await self._ready()
        return await asyncio.to_thread(self._stat_sync, key)

    def _list_sync(self, prefix: str) -> list[ObjectInfo]:
        out = []
        for obj in self.client.list_objects(self.bucket, prefix=prefix or None, recursive=True):
            if obj.is_dir or obj.object_name is None:
                continue
            # S3 listings carry no user metadata: one HEAD per object for its sha256.
            info = self._stat_sync(obj.object_name)
            if info is not None:
                out.append(info)
        return sorted(out, key=lambda i: i.key)

    @outages(s3_outage)
    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        validate_prefix(prefix)
        await self._ready()
        return await asyncio.to_thread(self._list_sync, prefix)

    @outages(s3_outage)
    async def delete(self, key: str) -> None:
        validate_key(key)
        await self._ready()
        try:
            await asyncio.to_thread(self.client.remove_object, self.bucket, key)
        except Exception as exc:
            if not self._missing(exc):
                raise

    async def delete_prefix(self, prefix: str) -> int:
        # One DELETE per key: the batch call needs Content-MD5, which some S3 servers refuse.
        infos = await self.list(prefix)
        for info in infos:
            await self.delete(info.key)
        return len(infos)
