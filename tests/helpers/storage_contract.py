"""The ObjectStore contract, run against every implementation (local dir, S3 on moto).

A test module subclasses `StoreContract` and provides a `store` fixture; the tests live once,
so the implementations cannot drift apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shared.runtime.storage import ObjectInfo, ObjectNotFound, ObjectStore


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for p in parts:
        yield p


class Crash(RuntimeError):
    pass


async def crashing(*parts: bytes) -> AsyncIterator[bytes]:
    for p in parts:
        yield p
    raise Crash("writer died mid-stream")


BAD_KEYS = [
    "",
    "/abs/key",
    "a/../b",
    "..",
    "a/./b",
    "a//b",
    "a/b\x00c",
    "a/b\nc",
    "a\\b",
    "a/.sy-meta/x",
]


class StoreContract:
    async def test_round_trip_bytes(self, store: ObjectStore) -> None:
        data = b"hello world" * 1000
        info = await store.put("a/b/c.bin", data, content_type="application/x-test")
        assert isinstance(info, ObjectInfo)
        assert (info.key, info.size, info.sha256) == ("a/b/c.bin", len(data), sha(data))
        assert await store.get("a/b/c.bin") == data
        st = await store.stat("a/b/c.bin")
        assert st is not None and st.sha256 == sha(data) and st.size == len(data)

    async def test_empty_object(self, store: ObjectStore) -> None:
        info = await store.put("empty", b"")
        assert info.size == 0 and info.sha256 == sha(b"")
        assert await store.get("empty") == b""

    async def test_streaming_put_and_get(self, store: ObjectStore) -> None:
        parts = [bytes([i]) * (300_000 + i) for i in range(5)]
        info = await store.put("s/big", chunks(*parts))
        whole = b"".join(parts)
        assert info.size == len(whole) and info.sha256 == sha(whole)
        got = [c async for c in store.stream("s/big", chunk=1 << 16)]
        assert len(got) > 1 and all(len(c) <= 1 << 16 for c in got)
        assert b"".join(got) == whole
        st = await store.stat("s/big")
        assert st is not None and st.sha256 == sha(whole)

    async def test_put_from_file(self, store: ObjectStore, tmp_path: Path) -> None:
        p = tmp_path / "src.bin"
        p.write_bytes(b"file bytes" * 5000)
        info = await store.put("f/from-file", p)
        assert info.sha256 == sha(p.read_bytes()) and info.size == p.stat().st_size
        assert await store.get("f/from-file") == p.read_bytes()

    async def test_overwrite_replaces(self, store: ObjectStore) -> None:
        await store.put("o/k", b"old")
        info = await store.put("o/k", b"new content")
        assert await store.get("o/k") == b"new content"
        st = await store.stat("o/k")
        assert st is not None and st.sha256 == info.sha256 == sha(b"new content")

    async def test_failed_stream_leaves_old_object(self, store: ObjectStore) -> None:
        await store.put("atomic/k", b"committed")
        with pytest.raises(Crash):
            await store.put("atomic/k", crashing(b"half", b"written"))
        assert await store.get("atomic/k") == b"committed"
        with pytest.raises(Crash):
            await store.put("atomic/new", crashing(b"partial"))
        assert await store.stat("atomic/new") is None
        assert [i.key for i in await store.list("atomic/")] == ["atomic/k"]

    async def test_missing(self, store: ObjectStore) -> None:
        assert await store.stat("nope/x") is None
        with pytest.raises(ObjectNotFound):
            await store.get("nope/x")
        with pytest.raises(ObjectNotFound):
            async for _ in store.stream("nope/x"):
                pass

    async def test_list_prefix(self, store: ObjectStore) -> None:
        for k in ("l/a/1", "l/a/2", "l/ab/3", "l/b/4", "other/5"):
            await store.put(k, k.encode())
        assert [i.key for i in await store.list("l/a/")] == ["l/a/1", "l/a/2"]
        assert [i.key for i in await store.list("l/a")] == ["l/a/1", "l/a/2", "l/ab/3"]
        listed = await store.list("l/")
        assert [i.key for i in listed] == ["l/a/1", "l/a/2", "l/ab/3", "l/b/4"]
        assert all(i.sha256 == sha(i.key.encode()) and i.size == len(i.key) for i in listed)
        assert await store.list("nothing/") == []
        keys = [i.key for i in await store.list("")]
        assert "other/5" in keys and not any(".sy-" in k for k in keys)

    async def test_delete_idempotent(self, store: ObjectStore) -> None:
        await store.put("d/k", b"x")
        await store.delete("d/k")
        assert await store.stat("d/k") is None
        await store.delete("d/k")  # again: no error
        await store.delete("d/never-existed")
        assert await store.list("d/") == []

    async def test_delete_prefix(self, store: ObjectStore) -> None:
        for k in ("dp/v1/a", "dp/v1/b", "dp/v2/a", "dpx/a"):
            await store.put(k, b"1")
        assert await store.delete_prefix("dp/v1/") == 2
        assert [i.key for i in await store.list("dp")] == ["dp/v2/a", "dpx/a"]
        assert await store.delete_prefix("dp/v1/") == 0

    @pytest.mark.parametrize("key", BAD_KEYS)
    async def test_bad_keys(self, store: ObjectStore, key: str) -> None:
        with pytest.raises(ValueError):
            await store.put(key, b"x")
        with pytest.raises(ValueError):
            await store.stat(key)
        with pytest.raises(ValueError):
            await store.get(key)
        with pytest.raises(ValueError):
            await store.delete(key)
