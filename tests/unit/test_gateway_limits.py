"""Per-tenant admission: rates and token budgets with Retry-After, counted slots; slow streaming clients."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from services.gateway.limits import Slots
from services.gateway.sse import SLOW_CLIENTS, BoundedStreamingResponse
from shared.runtime.admission import STORAGE_ERRORS, Admission, Refused, rate_item
from shared.runtime.config import ConfigError, load_settings
from shared.runtime.health import HttpServer


async def test_rate_per_tenant_with_burst_and_retry_after() -> None:
    adm = Admission(load_settings(gateway_rate_limits={"acme": 2.0, "*": 1.0}, gateway_rate_burst_s=1.5))
    for _ in range(4):  # 2 rps over a 2 s window (1.5 rounded up): 4 at once
        await adm.request("acme")
    with pytest.raises(Refused) as refused:
        await adm.request("acme")
    assert refused.value.code == "rate_limit_exceeded" and 1 <= refused.value.retry_after <= 2
    await adm.request("beta")
    await adm.request("beta")  # "*": 1 rps x 2 s
    with pytest.raises(Refused):
        await adm.request("beta")
    await adm.request("gamma")  # tenants are counted apart
    free = Admission(load_settings())
    for _ in range(1000):
        await free.request("x")


async def test_token_budget_counts_cost_and_refuses_what_can_never_fit() -> None:
    adm = Admission(load_settings(gateway_token_budgets={"acme": 1000}))
    await adm.tokens("acme", 600)
    with pytest.raises(Refused) as spent:
        await adm.tokens("acme", 600)
    assert spent.value.code == "token_budget_exceeded" and spent.value.retry_after >= 1
    await adm.tokens("acme", 400)  # what is left still passes
    await adm.tokens("other", 10**9)  # no budget for "other" (and no "*"): never counted
    with pytest.raises(Refused) as too_big:
        await adm.tokens("acme", 1001)
    assert too_big.value.code == "tokens_exceed_budget" and "1000 tokens per minute" in too_big.value.message
    assert too_big.value.status == 400 and too_big.value.retry_after is None  # waiting never helps


async def test_a_spent_budget_says_to_wait_for_room_for_the_request() -> None:
    adm = Admission(load_settings(gateway_token_budgets={"acme": 1000}))
    await adm.tokens("acme", 1000)
    with pytest.raises(Refused) as spent:
        await adm.tokens("acme", 600)
    assert spent.value.retry_after >= 36  # 600 of 1,000 per minute frees in ~36 s, not in 1


@pytest.mark.parametrize(
    ("rate", "burst_s", "amount", "window_s"),
    [
        (0.1, 2.0, 1, 10),
        (0.5, 2.0, 1, 2),
        (1.9, 1.0, 2, 1),
        (2.0, 1.5, 4, 2),
        (0.01, 100.0, 1, 100),
        (100.0, 0.1, 100, 1),
    ],
)
def test_a_rate_is_what_it_says_fractional_ones_included(
    rate: float, burst_s: float, amount: int, window_s: int
) -> None:
    item = rate_item(rate, burst_s)
    assert (item.amount, item.get_expiry()) == (amount, window_s)


async def test_a_fractional_rate_admits_one_request_per_its_period() -> None:
    adm = Admission(load_settings(gateway_rate_limits={"acme": 0.1}))  # default burst 2 s
    await adm.request("acme")
    with pytest.raises(Refused) as refused:
        await adm.request("acme")  # a 2 s window would let this one through (5x the rate)
    assert 1 <= refused.value.retry_after <= 10


async def test_replicas_share_rates_and_budgets_in_redis(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two Admission objects (two replicas) on one real Redis count one budget per tenant."""
    from tests.helpers.redis import redis_server

    with redis_server(tmp_path / "redis") as url:
        s = load_settings(
            gateway_rate_limits={"acme": 1.0},
            gateway_rate_burst_s=1.0,
            gateway_token_budgets={"acme": 100},
            limits_storage_uri=url,
        )
        one, two = Admission(s), Admission(s)
        await one.request("acme")
        with pytest.raises(Refused):
            await two.request("acme")
        await two.tokens("acme", 80)
        with pytest.raises(Refused) as spent:
            await one.tokens("acme", 30)
        assert spent.value.code == "token_budget_exceeded"
    # Redis gone: requests are admitted (counted in sy_admission_storage_errors_total), never a 500
    # and never a hang past the client's socket timeout.
    before = STORAGE_ERRORS._value.get()
    await one.request("acme")
    await one.tokens("acme", 100)
    assert STORAGE_ERRORS._value.get() >= before + 2


@pytest.mark.parametrize("rates", [{"acme": 0}, {"acme": -1}, {"acme": float("inf")}, {"acme": float("nan")}])
def test_a_rate_that_admits_nothing_is_a_settings_error(rates: dict[str, float]) -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(gateway_rate_limits=rates)
    assert "SY_GATEWAY_RATE_LIMITS.acme" in str(exc.value)


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
