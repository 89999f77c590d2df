"""The launcher's canary: its verdict on /readyz, its console lines, its timeout and its skip rule.

A real (tiny) gateway stand-in serves /v1/chat/completions and /metrics over HTTP; the launcher's
side is the same Health + health_app the launcher serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from shared.devstack.embedded.canary import Canary, GatewayTraffic, RestProbe
from shared.runtime.health import Health, HttpServer, health_app


@dataclass
class FakeGateway:
    """What the canary talks to: answers chats as told and counts the records it 'produced'."""

    mode: str = "ok"  # ok | fail | hang
    chats: int = 0
    produced: int = 0  # sy_produced_total, as the real gateway's /metrics reports it
    bodies: list[dict[str, object]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends a hang (at teardown)

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            self.chats += 1
            self.bodies.append(await request.json())
            if request.headers.get("authorization") != "Bearer sk-test":
                return JSONResponse({"error": "bad key"}, status_code=401)
            if self.mode == "hang":
                await asyncio.wait_for(self.release.wait(), timeout=30)
            if self.mode == "fail":
                return JSONResponse({"error": {"message": "no pool"}}, status_code=503)
            self.produced += 1
            return JSONResponse({"choices": [{"message": {"content": "x"}}]})

        async def metrics(_: Request) -> Response:
            return PlainTextResponse(
                "# HELP sy_produced_total Records produced, by topic\n"
                "# TYPE sy_produced_total counter\n"
                f'sy_produced_total{{topic="sy.prepared"}} {self.produced}.0\n'
                'sy_produced_total{topic="sy.requests"} 0.0\n'
            )

        return Starlette(
            routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/metrics", metrics)]
        )


@dataclass
class Rig:
    gateway: FakeGateway
    canary: Canary
    readyz_url: str
    http: httpx.AsyncClient
    lines: list[str]

    async def readyz(self) -> tuple[int, dict[str, object]]:
        r = await self.http.get(self.readyz_url)
        return r.status_code, r.json()


def canary_ok_gauge() -> float | None:
    return REGISTRY.get_sample_value("sy_canary_ok")


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    gateway = FakeGateway()
    gw_server = HttpServer(gateway.app(), "127.0.0.1", 0)
    await gw_server.start()
    health = Health("launcher")
    admin = HttpServer(health_app(health), "127.0.0.1", 0)
    await admin.start()
    lines: list[str] = []
    async with httpx.AsyncClient() as http:
        gw_url = f"http://127.0.0.1:{gw_server.port}"
        canary = Canary(
            {"rest": RestProbe(http, gw_url, "sk-test", "sy-tiny")},
            interval_s=0.05,
            timeout_s=0.5,
            traffic=GatewayTraffic(http, f"{gw_url}/metrics"),
            say=lines.append,
        )
        health.add_check("canary", canary.ready)
        health.built = True
        yield Rig(gateway, canary, f"http://127.0.0.1:{admin.port}/readyz", http, lines)
    gateway.release.set()
    await admin.stop()
    await gw_server.stop()


async def test_failing_canary_turns_readyz_false_and_recovery_turns_it_true(rig: Rig) -> None:
    status, body = await rig.readyz()
    assert status == 503 and body["checks"]["canary"] is False  # no round has passed yet

    assert await rig.canary.round() is True
    status, body = await rig.readyz()
    assert status == 200 and body["checks"]["canary"] is True
    assert canary_ok_gauge() == 1
    req = rig.gateway.bodies[-1]
    assert req["max_tokens"] == 1 and req["temperature"] == 1  # never cacheable, costs one token
    assert len(rig.lines) == 1 and rig.lines[0].startswith("canary: ok")

    rig.gateway.mode = "fail"
    assert await rig.canary.round() is False
    status, body = await rig.readyz()
    assert status == 503 and body["checks"]["canary"] is False
    assert canary_ok_gauge() == 0
    assert len(rig.lines) == 2 and "FAILED" in rig.lines[1] and "HTTP 503" in rig.lines[1]
    assert await rig.canary.round() is False
    assert len(rig.lines) == 2, "a failure is said once, not every round"

    rig.gateway.mode = "ok"
    assert await rig.canary.round() is True
    status, body = await rig.readyz()
    assert status == 200 and body["checks"]["canary"] is True
    assert canary_ok_gauge() == 1
    assert len(rig.lines) == 3 and rig.lines[2].startswith("canary: recovered")
    assert REGISTRY.get_sample_value("sy_canary_seconds_count", {"path": "rest"}) >= 2


async def test_a_canary_slower_than_its_timeout_fails(rig: Rig) -> None:
    assert await rig.canary.round() is True
    rig.gateway.mode = "hang"
    assert await rig.canary.round() is False
    assert "no answer within 0.5s" in rig.canary.failures["rest"]
    assert (await rig.readyz())[0] == 503
    assert 0.5 <= REGISTRY.get_sample_value("sy_canary_last_seconds", {"path": "rest"}) < 5


async def test_a_round_is_skipped_while_the_gateway_has_other_traffic(rig: Rig) -> None:
    assert await rig.canary.round() is True
    assert await rig.canary.round() is True, "its own request is not other traffic"
    assert rig.gateway.chats == 2

    rig.gateway.produced += 3  # someone else's requests went through the gateway
    skipped = REGISTRY.get_sample_value("sy_canary_rounds_total", {"outcome": "skipped"}) or 0
    assert await rig.canary.round() is None
    assert rig.gateway.chats == 2, "a skipped round sends nothing"
    assert REGISTRY.get_sample_value("sy_canary_rounds_total", {"outcome": "skipped"}) == skipped + 1
    assert (await rig.readyz())[0] == 200, "a skipped round keeps the last verdict"

    assert await rig.canary.round() is True  # quiet again: the canary runs
    assert rig.gateway.chats == 3


async def test_run_sends_rounds_until_stopped(rig: Rig) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(rig.canary.run(stop))
    for _ in range(100):
        if rig.gateway.chats >= 3:
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(task, timeout=2)
    assert rig.gateway.chats >= 3
    assert (await rig.readyz())[0] == 200
