"""Dependency outages raise DependencyUnavailable (issue 32); a genuine not-found keeps its error.

Real endpoints, no mocks of the clients: a closed localhost port (nothing listens), a port that
accepts and never answers, small local HTTP and gRPC servers that answer as the real dependency
does when it is down (503, gRPC UNAVAILABLE) or when the thing asked for does not exist (404,
NoSuchKey, gRPC NOT_FOUND, Milvus code 100), and a server stopped after the client connected.
Client timeouts are short, so each test takes well under 5 s.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import numpy as np
import pytest
from switchyard.v1.envelope_pb2 import ChatMessage, Request, SamplingParams

from shared.runtime.config import load_settings
from shared.runtime.envelope import DependencyUnavailable, Envelope, ErrorCode, Kind, Rejected

pytestmark = pytest.mark.timeout(30)


def closed_port() -> int:
    """A localhost port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


Answer = tuple[int, str, bytes]  # status, content type, body


@contextmanager
def http_server(answer: Callable[[str, str], Answer]) -> Iterator[str]:
    """A local HTTP server; `answer(method, path)` says what to reply. Yields host:port."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            status, ctype, body = answer(self.command, urlsplit(self.path).path)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_PUT = do_DELETE = do_POST = _reply

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@contextmanager
def grpc_server(
    handlers: dict[str, grpc.RpcMethodHandler], default: grpc.RpcMethodHandler | None = None
) -> Iterator[tuple[str, grpc.Server]]:
    """A local gRPC server answering the given full method names (others: `default`)."""

    class Generic(grpc.GenericRpcHandler):
        def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
            return handlers.get(details.method, default)  # type: ignore[attr-defined]

    srv = grpc.server(ThreadPoolExecutor(4))
    srv.add_generic_rpc_handlers((Generic(),))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    try:
        yield f"127.0.0.1:{port}", srv
    finally:
        srv.stop(None)


def aborting(code: grpc.StatusCode, details: str) -> grpc.RpcMethodHandler:
    def call(request: bytes, ctx: grpc.ServicerContext) -> bytes:
        ctx.abort(code, details)
        return b""

    return grpc.unary_unary_rpc_method_handler(call)


def chat(adapter: str = "", request_id: str = "r1") -> Envelope:
    return Envelope(
        request_id=request_id,
        tenant="acme",
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        adapter=adapter,
        request=Request(
            messages=[ChatMessage(role="user", content="what is 2+2?")],
            sampling=SamplingParams(max_tokens=8, temperature=0.0),
        ),
    )


# ------------------------------------------------------------------------------------ registry

JSON = "application/json"
NOT_FOUND_JSON = b'{"error": {"message": "adapter not found", "type": "not_found"}}'


def registry_client(host_port: str, timeout_s: float = 2.0) -> Any:
    from shared.adapters.registry_client import RegistryClient

    return RegistryClient(load_settings(registry_url=f"http://{host_port}"), timeout_s=timeout_s)


async def test_registry_unreachable_is_dependency_unavailable(tmp_path: Path) -> None:
    from services.preprocess.adapters import AdapterPinner

    async with registry_client(f"127.0.0.1:{closed_port()}") as client:
        with pytest.raises(DependencyUnavailable) as ei:
            await client.resolve("acme", "math@1")
        assert ei.value.dependency == "registry"
        with pytest.raises(DependencyUnavailable) as ei:
            await client.list_visible("acme")
        assert ei.value.dependency == "registry"
        dest = tmp_path / "a" / "adapter_model.safetensors"
        with pytest.raises(DependencyUnavailable) as ei:
            await client.download("acme", "math", 1, "adapter_model.safetensors", dest, "0" * 64)
        assert ei.value.dependency == "registry" and not dest.exists()
        # The stage that pins adapters waits (the bus) instead of refusing the request.
        with pytest.raises(DependencyUnavailable):
            await AdapterPinner({"sy-tiny"}, client.resolve).pin(chat(adapter="math@1"))


async def test_registry_that_never_answers_is_dependency_unavailable() -> None:
    with silent_port() as port:
        async with registry_client(f"127.0.0.1:{port}", timeout_s=0.5) as client:
            with pytest.raises(DependencyUnavailable) as ei:
                await client.resolve("acme", "math@1")
    assert ei.value.dependency == "registry" and "ReadTimeout" in ei.value.reason


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_registry_gateway_errors_are_dependency_unavailable(status: int, tmp_path: Path) -> None:
    with http_server(lambda method, path: (status, "text/html", b"<h1>bad gateway</h1>")) as hp:
        async with registry_client(hp) as client:
            with pytest.raises(DependencyUnavailable) as ei:
                await client.resolve("acme", "math@1")
            assert ei.value.dependency == "registry" and str(status) in ei.value.reason
            with pytest.raises(DependencyUnavailable):
                await client.download("acme", "math", 1, "adapter_config.json", tmp_path / "c.json", "0" * 64)


async def test_registry_missing_adapter_stays_not_found(tmp_path: Path) -> None:
    from services.preprocess.adapters import AdapterPinner
    from shared.adapters.registry_client import RegistryError

    with http_server(lambda method, path: (404, JSON, NOT_FOUND_JSON)) as hp:
        async with registry_client(hp) as client:
            assert await client.resolve("acme", "math@1") is None
            with pytest.raises(RegistryError) as ei:
                await client.download("acme", "math", 1, "adapter_config.json", tmp_path / "c.json", "0" * 64)
            assert ei.value.status == 404 and not isinstance(ei.value, DependencyUnavailable)
            with pytest.raises(Rejected) as rj:
                await AdapterPinner({"sy-tiny"}, client.resolve).pin(chat(adapter="math@1"))
            assert rj.value.code == ErrorCode.ADAPTER_NOT_FOUND


# ------------------------------------------------------------------------------- object store

BUCKET = "sy-test"
XML = "application/xml"


def s3_error(code: str, key: str = "") -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{code}</Message>'
        f"<Key>{key}</Key><BucketName>{BUCKET}</BucketName><Resource>/{BUCKET}/{key}</Resource>"
        "<RequestId>1</RequestId><HostId>1</HostId></Error>"
    ).encode()


def s3_store(endpoint: str) -> Any:
    """S3Store at `endpoint`; its minio client without urllib3's retries (5, with backoff: ~6 s
    against a closed port), so the outage surfaces at once."""
    import urllib3
    from minio import Minio

    from shared.runtime.storage import S3Store

    store = S3Store(endpoint, BUCKET, region="us-east-1")
    store.client = Minio(
        endpoint,
        secure=False,
        region="us-east-1",
        http_client=urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=1.0, read=1.0), retries=urllib3.Retry(total=0)
        ),
    )
    return store


async def test_s3_unreachable_is_dependency_unavailable() -> None:
    store = s3_store(f"127.0.0.1:{closed_port()}")
    for call in (
        lambda: store.get("media/a.png"),
        lambda: store.put("media/a.png", b"x"),
        lambda: store.stat("media/a.png"),
        lambda: store.list("media/"),
        lambda: store.delete("media/a.png"),
    ):
        with pytest.raises(DependencyUnavailable) as ei:
            await call()
        assert ei.value.dependency == "object_store"
        assert "MaxRetryError" in ei.value.reason


async def test_s3_that_never_answers_is_dependency_unavailable() -> None:
    with silent_port() as port:
        with pytest.raises(DependencyUnavailable) as ei:
            await s3_store(f"127.0.0.1:{port}").get("media/a.png")
    assert ei.value.dependency == "object_store"


@pytest.mark.parametrize("status, body", [(503, s3_error("XMinioServerNotInitialized")), (502, b"<html/>")])
async def test_s3_5xx_is_dependency_unavailable(status: int, body: bytes) -> None:
    ctype = XML if body.startswith(b"<?xml") else "text/html"
    with http_server(lambda method, path: (status, ctype, body)) as hp:
        store = s3_store(hp)
        with pytest.raises(DependencyUnavailable) as ei:
            await store.get("media/a.png")
        assert ei.value.dependency == "object_store"
        store._bucket_ready = True  # past the bucket check: the object calls themselves
        for call in (lambda: store.get("media/a.png"), lambda: store.put("media/a.png", b"x")):
            with pytest.raises(DependencyUnavailable):
                await call()


async def test_s3_missing_object_stays_not_found() -> None:
    from shared.runtime.storage import ObjectNotFound

    def answer(method: str, path: str) -> Answer:
        if path.rstrip("/") == f"/{BUCKET}":
            return 200, XML, b""  # the bucket exists
        return 404, XML, s3_error("NoSuchKey", path.split("/", 2)[-1])

    with http_server(answer) as hp:
        store = s3_store(hp)
        with pytest.raises(ObjectNotFound):
            await store.get("media/missing.png")
        assert await store.stat("media/missing.png") is None
        await store.delete("media/missing.png")  # deleting what is not there is fine


async def test_local_store_io_error_is_dependency_unavailable(tmp_path: Path) -> None:
    """A real EIO from the kernel (reading /proc/self/mem at offset 0), as a failing disk or NFS
    mount gives; a missing object is still ObjectNotFound."""
    from shared.runtime.storage import LocalStore, ObjectNotFound

    store = LocalStore(tmp_path / "objects")
    (store.root / "media").mkdir(parents=True)
    (store.root / "media" / "a.png").symlink_to("/proc/self/mem")
    with pytest.raises(DependencyUnavailable) as ei:
        await store.get("media/a.png")
    assert ei.value.dependency == "object_store" and "Errno 5" in ei.value.reason
    with pytest.raises(DependencyUnavailable):
        _ = [b async for b in store.stream("media/a.png")]
    with pytest.raises(ObjectNotFound):
        await store.get("media/missing.png")


async def test_local_store_source_error_is_not_an_outage(tmp_path: Path) -> None:
    """EIO reading the *caller's* file is that file's problem, not the store being down."""
    from shared.runtime.storage import LocalStore

    store = LocalStore(tmp_path / "objects")
    with pytest.raises(OSError) as ei:
        await store.put("media/b.bin", Path("/proc/self/mem"))
    assert not isinstance(ei.value, DependencyUnavailable)


# ------------------------------------------------------------------------------------- Triton

TRITON = "/inference.GRPCInferenceService/"
UNKNOWN_MODEL = "Request for unknown model: 'nope' is not found"
KW = {"max_tokens": 4, "temperature": 0.0, "n": 1}


def stream_aborting(code: grpc.StatusCode, details: str) -> grpc.RpcMethodHandler:
    def stream(requests: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[bytes]:
        next(iter(requests), None)
        ctx.abort(code, details)
        yield b""

    return grpc.stream_stream_rpc_method_handler(stream)


async def test_triton_unreachable_is_dependency_unavailable(tmp_path: Path) -> None:
    from services.triton_worker.client import TritonEngine
    from services.triton_worker.models import ModelCatalog

    engine = TritonEngine(f"127.0.0.1:{closed_port()}", "http://127.0.0.1:1/metrics", 2.0)
    try:
        with pytest.raises(DependencyUnavailable) as ei:
            await engine.refresh()
        assert ei.value.dependency == "triton"
        with pytest.raises(DependencyUnavailable) as ei:
            _ = [s async for s in engine.generate("sy-tiny", [1, 2, 3], KW, "r1")]
        assert ei.value.dependency == "triton"
        with pytest.raises(DependencyUnavailable):
            await ModelCatalog(engine.client, tmp_path).get("sy-tiny")
    finally:
        await engine.close()


async def test_triton_unknown_model_stays_a_request_error() -> None:
    from tritonclient.grpc import service_pb2

    from services.triton_worker.client import TritonEngine, TritonError

    def stream(requests: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[Any]:
        for _ in requests:
            yield service_pb2.ModelStreamInferResponse(error_message=UNKNOWN_MODEL)
            return

    handlers = {
        TRITON + "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(
            stream, response_serializer=service_pb2.ModelStreamInferResponse.SerializeToString
        )
    }
    with grpc_server(handlers) as (url, _):
        engine = TritonEngine(url, f"http://{url}/metrics", 2.0)
        try:
            with pytest.raises(TritonError, match="unknown model"):
                _ = [s async for s in engine.generate("nope", [1, 2, 3], KW, "r1")]
        finally:
            await engine.close()


async def test_triton_stream_unavailable_from_a_live_server_is_dependency_unavailable() -> None:
    """Triton shutting down (or reloading the model) answers UNAVAILABLE: wait, not dead-letter."""
    from services.triton_worker.client import TritonEngine

    handlers = {TRITON + "ModelStreamInfer": stream_aborting(grpc.StatusCode.UNAVAILABLE, "shutting down")}
    with grpc_server(handlers) as (url, _):
        engine = TritonEngine(url, f"http://{url}/metrics", 2.0)
        try:
            with pytest.raises(DependencyUnavailable) as ei:
                _ = [s async for s in engine.generate("sy-tiny", [1, 2, 3], KW, "r1")]
            assert ei.value.dependency == "triton" and "shutting down" in ei.value.reason
        finally:
            await engine.close()


REWARD_ITEMS = [("reward_model", 1.0, {"model": "rm", "timeout_s": "2"})]


async def test_reward_model_unreachable_is_dependency_unavailable() -> None:
    from shared.rewards import Sample, SpecItem, default_functions, score_group

    fns = default_functions(f"127.0.0.1:{closed_port()}")
    try:
        with pytest.raises(DependencyUnavailable) as ei:
            await score_group([Sample("q", "a")], [SpecItem(*i) for i in REWARD_ITEMS], fns)
        assert ei.value.dependency == "triton"
    finally:
        await fns["reward_model"].aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "code, waits",
    [(grpc.StatusCode.NOT_FOUND, False), (grpc.StatusCode.UNAVAILABLE, True)],
)
async def test_reward_model_errors_of_a_live_triton(code: grpc.StatusCode, waits: bool) -> None:
    """An unknown reward model keeps RewardUnavailable (retried, then DLQ'd: it will not appear);
    UNAVAILABLE (model loading, server stopping) is waited for."""
    from shared.rewards import RewardUnavailable, Sample, SpecItem, default_functions

    with grpc_server({TRITON + "ModelInfer": aborting(code, UNKNOWN_MODEL)}) as (url, _):
        fns = default_functions(url)
        try:
            with pytest.raises(RewardUnavailable if not waits else DependencyUnavailable) as ei:
                await fns["reward_model"].score([Sample("q", "a")], SpecItem(*REWARD_ITEMS[0]).params)
            assert isinstance(ei.value, DependencyUnavailable) == waits
        finally:
            await fns["reward_model"].aclose()  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------- Milvus

MILVUS = "/milvus.proto.milvus.MilvusService/"


def milvus_handlers() -> dict[str, grpc.RpcMethodHandler]:
    from pymilvus.grpc_gen import common_pb2, milvus_pb2

    def connect(request: Any, ctx: grpc.ServicerContext) -> Any:
        return milvus_pb2.ConnectResponse(status=common_pb2.Status(), identifier=1)

    return {
        MILVUS + "Connect": grpc.unary_unary_rpc_method_handler(
            connect,
            request_deserializer=milvus_pb2.ConnectRequest.FromString,
            response_serializer=milvus_pb2.ConnectResponse.SerializeToString,
        )
    }


def status_only(code: int, reason: str) -> grpc.RpcMethodHandler:
    """Every Milvus response has `common.Status status = 1`: one body answers any method."""
    from pymilvus.grpc_gen import common_pb2, milvus_pb2

    body = milvus_pb2.BoolResponse(status=common_pb2.Status(code=code, reason=reason)).SerializeToString()
    return grpc.unary_unary_rpc_method_handler(lambda request, ctx: body)


def cache_key() -> Any:
    from services.cache.keys import cache_key

    return cache_key(chat())


VEC = np.zeros(384, dtype=np.float32)


def test_milvus_unreachable_is_dependency_unavailable() -> None:
    from services.cache.store import CacheStore

    t0 = time.monotonic()
    with pytest.raises(DependencyUnavailable) as ei:
        CacheStore(f"http://127.0.0.1:{closed_port()}", timeout_s=2.0)
    assert ei.value.dependency == "milvus" and time.monotonic() - t0 < 5


async def test_milvus_going_away_is_dependency_unavailable_and_write_back_waits() -> None:
    """Connected, then Milvus stops: reads and writes raise DependencyUnavailable; the cache's
    write-back passes it on (the bus waits) rather than dropping the entry."""
    from services.cache.embed import BatchingEmbedder
    from services.cache.lookup import SemanticCache
    from services.cache.policy import CachePolicy
    from services.cache.store import CacheStore, Purge

    with grpc_server(milvus_handlers()) as (url, srv):
        store = CacheStore(f"http://{url}", timeout_s=2.0)
        srv.stop(None)
        try:
            for call in (
                lambda: store.search(cache_key(), VEC, 5),
                lambda: store.put(cache_key(), VEC, entry_id="e", request_id="r", response=b"", ttl_s=60),
                lambda: store.delete(Purge(tenant="acme")),
                store.count,
            ):
                with pytest.raises(DependencyUnavailable) as ei:
                    call()
                assert ei.value.dependency == "milvus"
            embedder = BatchingEmbedder(lambda texts: np.zeros((len(texts), 384), dtype=np.float32))
            cache = SemanticCache(store, embedder, CachePolicy())
            env = chat()
            env.response.choices.add(index=0, text="4", finish_reason="stop")
            with pytest.raises(DependencyUnavailable):
                await cache.write_back(env)
            with pytest.raises(DependencyUnavailable):  # the stage serves this as a miss (stage.py)
                await cache.lookup(chat(request_id="r2"))
        finally:
            store.close()


async def test_cache_stage_lookup_is_a_miss_but_write_back_waits(tmp_path: Path) -> None:
    """The cache stage's own handlers (services/cache/stage.py) with Milvus gone: a lookup is still
    served as a miss (the cache is an optimisation), the write-back raises DependencyUnavailable
    for the bus to wait on instead of logging and dropping the entry."""
    from services.cache.embed import BatchingEmbedder
    from services.cache.lookup import SemanticCache
    from services.cache.policy import CachePolicy
    from services.cache.stage import CacheStage
    from services.cache.store import CacheStore
    from shared.runtime.storage import open_store

    with grpc_server(milvus_handlers()) as (url, srv):
        settings = load_settings(
            milvus_uri=f"http://{url}", cache_enabled=True, var_dir=tmp_path, s3_endpoint=None
        )
        stage = CacheStage(settings, open_store(settings))
        store = CacheStore(f"http://{url}", timeout_s=2.0)
        srv.stop(None)
        embedder = BatchingEmbedder(lambda texts: np.zeros((len(texts), 384), dtype=np.float32))
        stage.cache = SemanticCache(store, embedder, CachePolicy())
        try:
            out = await stage.handle(chat())
            assert [e.topic for e in out] == [settings.topic("routing")]
            served = chat()
            served.response.choices.add(index=0, text="4", finish_reason="stop")
            with pytest.raises(DependencyUnavailable) as ei:
                await stage.write_back(served)
            assert ei.value.dependency == "milvus"
        finally:
            store.close()


def test_milvus_unavailable_and_deadline_from_a_live_server_are_outages() -> None:
    """Milvus answering UNAVAILABLE (pymilvus retries, then raises MilvusException with the gRPC
    code) or not answering in time (DEADLINE_EXCEEDED): both are outages."""
    from services.cache.store import CacheStore, milvus_down

    def slow(request: bytes, ctx: grpc.ServicerContext) -> bytes:
        time.sleep(1.0)
        return b""

    for handler in (
        aborting(grpc.StatusCode.UNAVAILABLE, "proxy not ready"),
        grpc.unary_unary_rpc_method_handler(slow),
    ):
        with grpc_server(milvus_handlers(), default=handler) as (url, _):
            store = CacheStore(f"http://{url}", timeout_s=2.0)
            try:
                with pytest.raises(Exception) as ei:
                    store.client.query("sy_cache", filter='id == "x"', output_fields=["id"], timeout=0.5)
                assert milvus_down(ei.value), repr(ei.value)
            finally:
                store.close()


def test_milvus_missing_collection_stays_a_milvus_error() -> None:
    from pymilvus.exceptions import MilvusException

    from services.cache.store import CacheStore

    handler = status_only(100, "collection not found[collection=sy_cache]")
    with grpc_server(milvus_handlers(), default=handler) as (url, _):
        store = CacheStore(f"http://{url}", timeout_s=2.0)
        try:
            with pytest.raises(MilvusException) as ei:
                store.search(cache_key(), VEC, 5)
            assert ei.value.code == 100 and not isinstance(ei.value, DependencyUnavailable)
            with pytest.raises(MilvusException):
                store.count()
        finally:
            store.close()


def test_outage_chain_does_not_loop() -> None:
    """pymilvus raises `e from e`: walking the causes terminates."""
    from shared.runtime.outages import caused_by

    exc = RuntimeError("x")
    exc.__cause__ = exc
    assert not caused_by(exc, lambda e: False)
