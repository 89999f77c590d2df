"""Admission limits of the gateway process on the real broker (no stage behind it: requests wait
until their 2 s deadline, which is what holds slots): per-tenant rate with Retry-After, this
replica's bound on waiting requests, concurrent streams per tenant; API keys never in the logs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from shared.config import load_settings
from shared.kafka_admin import create_topics
from tests.helpers.kafka import service_env, services
from tests.helpers.reliability import record

BODY = {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def test_rate_overload_and_stream_limits(broker, tmp_path: Path) -> None:
    prefix, var_dir = "limits.", tmp_path / "var"
    var_dir.mkdir()
    await create_topics(load_settings(kafka_bootstrap=broker.bootstrap, topic_prefix=prefix))
    env = service_env(
        broker.bootstrap,
        prefix,
        var_dir,
        SY_GATEWAY_TIMEOUT_S="2",
        SY_API_KEYS=json.dumps({"sk-rate": "slow", "sk-free": "free", "sk-s": "streamer"}),
        SY_GATEWAY_RATE_LIMITS=json.dumps({"slow": 0.5}),
        SY_GATEWAY_RATE_BURST_S="2",
        SY_GATEWAY_MAX_IN_FLIGHT="3",
        SY_GATEWAY_MAX_STREAMS_PER_TENANT="1",
    )
    with services(["gateway"], env, var_dir) as procs:
        url = f"http://127.0.0.1:{procs['gateway'].port}/v1/chat/completions"

        def key(k: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {k}"}

        async with httpx.AsyncClient(timeout=30) as http:
            # Rate: 0.5 rps with a 2 s burst = 1 request, then 429 with Retry-After.
            first = asyncio.create_task(http.post(url, json=BODY, headers=key("sk-rate")))
            await asyncio.sleep(0.2)
            limited = await http.post(url, json=BODY, headers=key("sk-rate"))
            assert limited.status_code == 429, limited.text
            assert limited.json()["error"]["type"] == "rate_limit_error"
            assert 1 <= int(limited.headers["retry-after"]) <= 2
            assert (await first).status_code == 504  # nothing behind the gateway: the deadline
            # Streams: one open stream per tenant; a second one is refused while the first is open.
            stream = asyncio.create_task(http.post(url, json={**BODY, "stream": True}, headers=key("sk-s")))
            await asyncio.sleep(0.3)
            second = await http.post(url, json={**BODY, "stream": True}, headers=key("sk-s"))
            assert second.status_code == 429 and second.json()["error"]["code"] == "too_many_streams"
            await stream
            # Overload: 3 waiting requests fill this replica; the 4th gets 503 at once, not a queue.
            waiting = [
                asyncio.create_task(http.post(url, json=BODY, headers=key("sk-free"))) for _ in range(3)
            ]
            await asyncio.sleep(0.3)
            over = await http.post(url, json=BODY, headers=key("sk-free"))
            assert over.status_code == 503 and over.json()["error"]["code"] == "overloaded"
            assert over.headers["retry-after"] == "1"
            assert [r.status_code for r in await asyncio.gather(*waiting)] == [504, 504, 504]
            # Slots come back: the next request is admitted again.
            again = await http.post(url, json=BODY, headers=key("sk-free"))
            assert again.status_code == 504
        log = procs["gateway"].log_path.read_text()
    for secret in ("sk-rate", "sk-free", "sk-s"):
        assert secret not in log
    record(
        "limits",
        "rate 0.5 rps: 2nd request 429 Retry-After; 2nd stream of a tenant 429 too_many_streams; "
        "4th waiting request on a 3-slot replica 503 overloaded at once; slots given back; no key logged",
    )
