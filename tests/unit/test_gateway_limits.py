"""Per-tenant admission: token buckets with Retry-After, counted slots; slow streaming clients."""

from __future__ import annotations

import asyncio
import socket

import httpx
from starlette.applications import Starlette
from starlette.routing import Route

from services.gateway.limits import Slots, TenantLimiter
from services.gateway.sse import SLOW_CLIENTS, BoundedStreamingResponse
from shared.health import HttpServer


def test_token_bucket_per_tenant_with_burst_and_retry_after() -> None:
    lim = TenantLimiter({"acme": 2.0, "*": 1.0}, burst_s=1.5)
    assert [lim.acquire("acme", now=0.0) for _ in range(3)] == [None, None, None]  # burst: 2 rps x 1.5 s
    wait = lim.acquire("acme", now=0.0)
    assert wait is not None and abs(wait - 0.5) < 1e-9  # the next token in half a second at 2 rps
    assert lim.acquire("acme", now=0.5) is None
    assert lim.acquire("beta", now=0.0) is None and lim.acquire("beta", now=0.0) is not None  # "*"
    assert lim.acquire("acme", now=0.5) is not None and lim.acquire("gamma", now=0.0) is None  # tenants apart
    free = TenantLimiter({})
    assert all(free.acquire("x", now=0.0) is None for _ in range(1000))


def test_slots_bound_and_release() -> None:
    s = Slots(2)
    assert s.take("a") and s.take("a") and not s.take("a") and s.take("b")
    s.give("a")
    assert s.used("a") == 1 and s.take("a")
    s.give("a")
    s.give("a")
    assert s.used("a") == 0


async def _serve_stream(chunk: bytes, chunks: int | None, closed: asyncio.Event):  # type: ignore[no-untyped-def]
    """A real uvicorn server whose one route streams `chunks` chunks (None: without end)."""

    async def body():  # type: ignore[no-untyped-def]
        try:
            i = 0
            while chunks is None or i < chunks:
                i += 1
                yield chunk
                await asyncio.sleep(0)
        finally:
            closed.set()

    async def endpoint(_: object) -> BoundedStreamingResponse:
        return BoundedStreamingResponse(body(), 1.0, media_type="text/event-stream")

    server = HttpServer(Starlette(routes=[Route("/s", endpoint)]), "127.0.0.1", 0, graceful_s=1)
    await server.start()
    return server


def _raw_get(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, as a stalled phone
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock


async def test_a_client_that_stops_reading_is_cut_off_and_its_stream_closed() -> None:
    closed = asyncio.Event()
    before = SLOW_CLIENTS._value.get()
    server = await _serve_stream(b"x" * 65536, None, closed)
    sock = await asyncio.to_thread(_raw_get, server.port)
    try:
        sock.settimeout(10)
        assert (await asyncio.to_thread(sock.recv, 64)).startswith(b"HTTP/1.1 200")  # then no more reads
        # Buffers fill, a write waits 1 s, the response ends: the generator's finally runs.
        await asyncio.wait_for(closed.wait(), timeout=20)
        assert SLOW_CLIENTS._value.get() == before + 1
        # The server closed the connection: reading on, the client reaches the end of what was sent.
        while await asyncio.to_thread(sock.recv, 1 << 20):
            pass
    finally:
        sock.close()
        await server.stop()


async def test_a_client_that_reads_gets_the_whole_stream() -> None:
    closed = asyncio.Event()
    before = SLOW_CLIENTS._value.get()
    server = await _serve_stream(b"y" * 65536, 64, closed)  # 4 MiB, well past every buffer
    try:
        async with httpx.AsyncClient() as http:
            r = await http.get(f"http://127.0.0.1:{server.port}/s", timeout=30)
        assert len(r.content) == 64 * 65536 and closed.is_set()
        assert SLOW_CLIENTS._value.get() == before
    finally:
        await server.stop()
