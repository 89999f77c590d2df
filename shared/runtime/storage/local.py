"""Object storage in a local directory (the embedded default; may be a network mount)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from shared.runtime.storage.errors import local_outage, outages
from shared.runtime.storage.objects import (
    CHUNK,
    DEFAULT_CT,
    RESERVED,
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
            sha = hash_file(path)  # sidecar missing or stale (crash between data and sidecar)
            info = ObjectInfo(key, st.st_size, sha, content_type=meta.get("content_type", DEFAULT_CT))
            self._replace_meta(key, info, st)
        return ObjectInfo(
            key=key,
            size=st.st_size,
            sha256=sha,
            etag=f"{st.st_mtime_ns:x}-{st.st_size:x}",
            mtime=st.st_mtime,
            content_type=meta.get("content_type", DEFAULT_CT),
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
    @outages(local_outage)
    async def put(self, key: str, data: Data, content_type: str = "application/octet-stream") -> ObjectInfo:
        path = self._path(key)
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        tmp = path.parent / f"{RESERVED}tmp-{uuid.uuid4().hex}"
        f = await asyncio.to_thread(open, tmp, "wb")
        try:
            try:
                size, sha = await spool(data, f)
                await asyncio.to_thread(os.fsync, f.fileno())
            finally:
                await asyncio.to_thread(f.close)
            info = await asyncio.to_thread(self._commit, tmp, key, sha, content_type)
        except BaseException:
            await asyncio.to_thread(tmp.unlink, missing_ok=True)
            raise
        log.debug("object stored", key=key, size=size)
        return info

    @outages(local_outage)
    async def get(self, key: str) -> bytes:
        try:
            return await asyncio.to_thread(self._path(key).read_bytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None

    @outages(local_outage)
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

    @outages(local_outage)
    async def stat(self, key: str) -> ObjectInfo | None:
        return await asyncio.to_thread(self._stat_sync, validate_key(key))

    @outages(local_outage)
    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        return await asyncio.to_thread(self._list_sync, validate_prefix(prefix))

    @outages(local_outage)
    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._delete_sync, validate_key(key))

    async def delete_prefix(self, prefix: str) -> int:
        infos = await self.list(prefix)
        for info in infos:
            await self.delete(info.key)
        return len(infos)
