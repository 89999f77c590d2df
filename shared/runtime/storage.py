"""One object-storage interface for every service: a local directory or S3/MinIO.

Objects are written whole or not at all (a reader never sees a half-written object under its
key), and each carries the sha256 of its bytes, computed while writing, so consumers can verify
what they download without a second pass over the data.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import hashlib
import inspect
import io
import json
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar, runtime_checkable

from shared.runtime.config import Settings
from shared.runtime.envelope import DependencyUnavailable
from shared.runtime.outages import FILESYSTEM_ERRNOS, NETWORK_ERRNOS, OBJECT_STORE, caused_by, network_down
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
Data = bytes | AsyncIterator[bytes] | Path | str
"""What `put` accepts: the bytes, an async stream of chunks, or the path of a local file."""

MAX_KEY_BYTES = 1024
RESERVED = ".sy-"  # path segments starting with this are the stores' own (sidecars, temp files)
CHUNK = 1 << 20


class ObjectNotFound(KeyError):
    """`get`/`stream` of a key that does not exist."""


# Outages of the store (issue 32): waited out by the bus, never dead-lettered. A missing object
# stays ObjectNotFound / None, and a refused request (bad key, access denied) keeps its error.
# A local directory may be a network mount: besides the network errnos, a full or read-only
# file system is the store being unavailable for writes, not the record's fault.
_LOCAL_OUTAGE_ERRNOS = NETWORK_ERRNOS | FILESYSTEM_ERRNOS | {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
_SOURCE_NOTE = "(while reading the data given to put: not an object store outage)"


def _from_source(exc: BaseException) -> bool:
    return _SOURCE_NOTE in getattr(exc, "__notes__", ())


def _local_outage(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _LOCAL_OUTAGE_ERRNOS and not _from_source(exc)


_S3_DOWN_STATUS = frozenset({500, 502, 503, 504})
_S3_DOWN_CODES = frozenset(
    {"ServiceUnavailable", "SlowDown", "InternalError", "RequestTimeout", "XMinioServerNotInitialized"}
)


def _s3_outage(exc: BaseException) -> bool:
    """Connection refused/reset, timeouts, urllib3's retries used up (MaxRetryError, also after
    5xx answers), a body cut off (ProtocolError), a 5xx from the server or a proxy before it."""
    import urllib3.exceptions as u3
    from minio.error import InvalidResponseError, S3Error, ServerError

    if _from_source(exc):
        return False

    def one(e: BaseException) -> bool:
        if isinstance(e, u3.MaxRetryError | u3.ProtocolError | u3.TimeoutError | u3.NewConnectionError):
            return True
        if isinstance(e, ServerError):
            return e.status_code in _S3_DOWN_STATUS
        if isinstance(e, InvalidResponseError):  # a non-XML answer, e.g. a proxy's 502 page
            return getattr(e, "_code", 0) in _S3_DOWN_STATUS
        if isinstance(e, S3Error):
            status = getattr(e.response, "status", 0)
            return e.code in _S3_DOWN_CODES or status in _S3_DOWN_STATUS
        return network_down(e)

    return caused_by(exc, one)


def _unavailable(exc: BaseException, what: str) -> DependencyUnavailable:
    return DependencyUnavailable(OBJECT_STORE, f"{what}: {type(exc).__name__}: {exc}"[:500])


def _outages(is_outage: Callable[[BaseException], bool]) -> Callable[[F], F]:
    """Decorate a store method (a coroutine or an async generator, its first argument the key or
    prefix): errors `is_outage` recognises leave as DependencyUnavailable, others unchanged."""

    def wrap(exc: Exception, fn: Callable[..., Any], args: tuple[Any, ...]) -> Exception:
        if isinstance(exc, DependencyUnavailable) or not is_outage(exc):
            return exc
        return _unavailable(exc, f"{fn.__name__} {args[0] if args else ''!r}")

    def deco(fn: F) -> F:
        if inspect.isasyncgenfunction(fn):

            @functools.wraps(fn)
            async def gen(self: Any, *args: Any, **kw: Any) -> AsyncIterator[bytes]:
                agen = fn(self, *args, **kw)
                try:
                    async for block in agen:
                        yield block
                except Exception as exc:
                    out = wrap(exc, fn, args)
                    if out is exc:
                        raise
                    raise out from exc
                finally:
                    await agen.aclose()

            return gen  # type: ignore[return-value]

        @functools.wraps(fn)
        async def call(self: Any, *args: Any, **kw: Any) -> Any:
            try:
                return await fn(self, *args, **kw)
            except Exception as exc:
                out = wrap(exc, fn, args)
                if out is exc:
                    raise
                raise out from exc

        return call  # type: ignore[return-value]

    return deco


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


async def _chunks(data: Data, chunk: int = CHUNK) -> AsyncIterator[bytes]:
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
        exc.add_note(_SOURCE_NOTE)
        raise


async def _spool(data: Data, f: BinaryIO) -> tuple[int, str]:
    """Write data into an open file while hashing it; returns (size, sha256)."""
    h, size = hashlib.sha256(), 0
    async for block in _chunks(data):
        h.update(block)
        size += len(block)
        await asyncio.to_thread(f.write, block)
    await asyncio.to_thread(f.flush)
    return size, h.hexdigest()


# --------------------------------------------------------------------------- local directory


class LocalStore:
    """Objects as files under `root/<key>`; metadata sidecars under `root/.sy-meta/<key>.json`.

    A put writes a temp file beside the target and `os.replace`s it, so a crash leaves either
    the old object or the new one. The sidecar (sha256, size, mtime) is replaced after the data;
    if a crash falls between the two, `stat` sees the size/mtime disagree and re-hashes.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.meta_root = self.root / f"{RESERVED}meta"

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    def _meta_path(self, key: str) -> Path:
        return self.meta_root / f"{validate_key(key)}.json"

    # sync helpers, run in threads -------------------------------------------------------
    def _replace_meta(self, key: str, info: ObjectInfo, st: os.stat_result) -> None:
        mp = self._meta_path(key)
        mp.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "sha256": info.sha256,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "content_type": info.content_type,
        }
        tmp = mp.parent / f"{RESERVED}tmp-{uuid.uuid4().hex}"
        tmp.write_text(json.dumps(body))
        os.replace(tmp, mp)

    def _stat_sync(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not path.is_file():
            return None
        meta: dict[str, Any] = {}
        try:
            meta = json.loads(self._meta_path(key).read_text())
        except (FileNotFoundError, NotADirectoryError, ValueError):
            pass
        sha = meta.get("sha256")
        if not sha or meta.get("size") != st.st_size or meta.get("mtime_ns") != st.st_mtime_ns:
            sha = _hash_file(path)  # sidecar missing or stale (crash between data and sidecar)
            info = ObjectInfo(key, st.st_size, sha, content_type=meta.get("content_type", _DEFAULT_CT))
            self._replace_meta(key, info, st)
        return ObjectInfo(
            key=key,
            size=st.st_size,
            sha256=sha,
            etag=f"{st.st_mtime_ns:x}-{st.st_size:x}",
            mtime=st.st_mtime,
            content_type=meta.get("content_type", _DEFAULT_CT),
        )

    def _commit(self, tmp: Path, key: str, sha: str, content_type: str) -> ObjectInfo:
        path = self._path(key)
        os.replace(tmp, path)
        st = path.stat()
        info = ObjectInfo(
            key, st.st_size, sha, f"{st.st_mtime_ns:x}-{st.st_size:x}", st.st_mtime, content_type
        )
        self._replace_meta(key, info, st)
        return info

    def _list_sync(self, prefix: str) -> list[ObjectInfo]:
        base = prefix.rpartition("/")[0]
        start = self.root / base if base else self.root
        if not start.is_dir():
            return []
        out = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(RESERVED))
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for fn in sorted(filenames):
                if fn.startswith(RESERVED):
                    continue
                key = fn if rel_dir == "." else f"{rel_dir}/{fn}"
                if key.startswith(prefix):
                    info = self._stat_sync(key)
                    if info is not None:
                        out.append(info)
        return sorted(out, key=lambda i: i.key)

    def _delete_sync(self, key: str) -> None:
        for p in (self._path(key), self._meta_path(key)):
            try:
                p.unlink()
            except (FileNotFoundError, NotADirectoryError):
                continue
            except IsADirectoryError:
                continue
            # Drop parent folders left empty so listings and 'folder' checks stay honest.
            parent, stop = p.parent, (self.meta_root if p.is_relative_to(self.meta_root) else self.root)
            while parent != stop and parent.is_relative_to(stop):
                try:
                    parent.rmdir()
                except OSError:
                    break
                parent = parent.parent

    # the interface -----------------------------------------------------------------------
    @_outages(_local_outage)
    async def put(self, key: str, data: Data, content_type: str = "application/octet-stream") -> ObjectInfo:
        path = self._path(key)
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        tmp = path.parent / f"{RESERVED}tmp-{uuid.uuid4().hex}"
        f = await asyncio.to_thread(open, tmp, "wb")
        try:
            try:
                size, sha = await _spool(data, f)
                await asyncio.to_thread(os.fsync, f.fileno())
            finally:
                await asyncio.to_thread(f.close)
            info = await asyncio.to_thread(self._commit, tmp, key, sha, content_type)
        except BaseException:
            await asyncio.to_thread(tmp.unlink, missing_ok=True)
            raise
        log.debug("object stored", key=key, size=size)
        return info

    @_outages(_local_outage)
    async def get(self, key: str) -> bytes:
        try:
            return await asyncio.to_thread(self._path(key).read_bytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None

    @_outages(_local_outage)
    async def stream(self, key: str, chunk: int = CHUNK) -> AsyncIterator[bytes]:
        try:
            f = await asyncio.to_thread(open, self._path(key), "rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None
        try:
            while block := await asyncio.to_thread(f.read, chunk):
                yield block
        finally:
            await asyncio.to_thread(f.close)

    @_outages(_local_outage)
    async def stat(self, key: str) -> ObjectInfo | None:
        return await asyncio.to_thread(self._stat_sync, validate_key(key))

    @_outages(_local_outage)
    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        return await asyncio.to_thread(self._list_sync, validate_prefix(prefix))

    @_outages(_local_outage)
    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._delete_sync, validate_key(key))

    async def delete_prefix(self, prefix: str) -> int:
        infos = await self.list(prefix)
        for info in infos:
            await self.delete(info.key)
        return len(infos)


_DEFAULT_CT = "application/octet-stream"


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- S3 / MinIO

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

    @_outages(_s3_outage)
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
            sha = await asyncio.to_thread(_hash_file, Path(path))
            return await self._fput(key, path, size, sha, content_type)
        f = await asyncio.to_thread(tempfile.NamedTemporaryFile, prefix="sy-spool-", delete=False)
        try:
            try:
                size, sha = await _spool(data, f)
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

    @_outages(_s3_outage)
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
            content_type=st.content_type or _DEFAULT_CT,
        )

    @_outages(_s3_outage)
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

    @_outages(_s3_outage)
    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        validate_prefix(prefix)
        await self._ready()
        return await asyncio.to_thread(self._list_sync, prefix)

    @_outages(_s3_outage)
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


def open_store(settings: Settings) -> ObjectStore:
    """S3 when SY_S3_ENDPOINT is set, else the local directory (embedded default)."""
    if settings.s3_endpoint:
        return S3Store(
            settings.s3_endpoint,
            settings.s3_bucket,
            access_key=settings.s3_access_key,
            secret_key=settings.s3_secret_key.get_secret_value() if settings.s3_secret_key else None,
            secure=settings.s3_secure,
            region=settings.s3_region,
        )
    return LocalStore(settings.object_dir)
