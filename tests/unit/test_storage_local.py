"""LocalStore: the shared ObjectStore contract plus what only a directory can show."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.runtime.config import load_settings
from shared.runtime.storage import LocalStore, ObjectStore, S3Store, open_store
from tests.helpers.storage_contract import StoreContract, sha


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "objects")


class TestLocalStoreContract(StoreContract):
    pass


async def test_layout_and_hidden_sidecars(store: LocalStore) -> None:
    await store.put("x/y.bin", b"data")
    assert (store.root / "x" / "y.bin").read_bytes() == b"data"
    assert (store.meta_root / "x" / "y.bin.json").is_file()
    assert [i.key for i in await store.list()] == ["x/y.bin"]


async def test_crash_leftovers_are_hidden(store: LocalStore) -> None:
    """A writer killed before os.replace leaves only a temp file, which no listing shows."""
    await store.put("k/obj", b"committed")
    (store.root / "k" / ".sy-tmp-deadbeef").write_bytes(b"half-writ")
    assert [i.key for i in await store.list("k/")] == ["k/obj"]
    assert await store.get("k/obj") == b"committed"


async def test_no_temp_file_left_after_success(store: LocalStore) -> None:
    await store.put("t/a", b"1")
    await store.put("t/a", b"2")
    assert sorted(os.listdir(store.root / "t")) == ["a"]


async def test_stale_sidecar_is_rehashed(store: LocalStore) -> None:
    """Crash between data replace and sidecar replace: stat notices and re-hashes."""
    await store.put("s/k", b"old")
    (store.root / "s" / "k").write_bytes(b"newer bytes")
    st = await store.stat("s/k")
    assert st is not None and st.sha256 == sha(b"newer bytes")
    (store.meta_root / "s" / "k.json").unlink()
    st = await store.stat("s/k")
    assert st is not None and st.sha256 == sha(b"newer bytes")


async def test_delete_removes_empty_folders(store: LocalStore) -> None:
    await store.put("a/b/c/d", b"1")
    await store.delete("a/b/c/d")
    assert not (store.root / "a").exists()
    assert not (store.meta_root / "a").exists()


def test_open_store_picks_backend(tmp_path: Path) -> None:
    local = open_store(load_settings(storage_dir=tmp_path / "o"))
    assert isinstance(local, LocalStore) and local.root == tmp_path / "o"
    assert isinstance(local, ObjectStore)
    s3 = open_store(load_settings(s3_endpoint="127.0.0.1:9", s3_access_key="a", s3_secret_key="b"))
    assert isinstance(s3, S3Store) and s3.bucket == "switchyard"
