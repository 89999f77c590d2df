"""S3Store against a real S3 server (moto's, in-process): the same contract as LocalStore."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pytest
from moto.server import ThreadedMotoServer

from shared.runtime.procs import free_port
from shared.runtime.storage import S3Store
from tests.helpers.storage_contract import StoreContract, sha

_buckets = itertools.count()


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def store(s3_endpoint: str) -> S3Store:
    """A fresh bucket per test (created by the store on first use)."""
    return S3Store(
        s3_endpoint,
        f"sy-test-{next(_buckets)}",
        access_key="testing",
        secret_key="testing",
        secure=False,
        region="us-east-1",
    )


class TestS3StoreContract(StoreContract):
    pass


async def test_sha256_is_user_metadata(store: S3Store) -> None:
    await store.put("m/k", b"payload")
    st = store.client.stat_object(store.bucket, "m/k")
    assert st.metadata["x-amz-meta-sha256"] == sha(b"payload")


async def test_bucket_created_once(store: S3Store, s3_endpoint: str) -> None:
    assert not store.client.bucket_exists(store.bucket)
    await store.put("a", b"1")
    assert store.client.bucket_exists(store.bucket)
    other = S3Store(s3_endpoint, store.bucket, access_key="testing", secret_key="testing", secure=False)
    assert await other.get("a") == b"1"  # existing bucket reused


def test_moto_server_answers(s3_endpoint: str) -> None:
    assert httpx.get(f"http://{s3_endpoint}/").status_code == 200
