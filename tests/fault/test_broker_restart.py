"""The embedded broker SIGKILLed under a backlog: the pipeline recovers on its own (issue 32).

The embedded broker keeps everything in memory, so its restart loses every topic's data and
every committed offset: the worst broker restart there is. Before the kill: an adapter in the
registry, 500 records waiting on sy.requests from a plain Kafka producer, and async requests
accepted by the gateway. After it:
- within 60 s of the restart, new chat and async requests complete;
- every async request accepted before the kill completes or fails with a reason (the gateway
  resubmits what its accepted log holds);
- sy.adapters holds the registry's state again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from switchyard.v1.events_pb2 import AdapterEvent

from shared.devstack.models.adapters import build_adapter
from tests.e2e.conftest import Pipeline
from tests.helpers.kafka import collect, produce

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

A = {"Authorization": "Bearer sk-a"}


@pytest.fixture(scope="module")
def stack(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    p = Pipeline(
        tmp_path_factory.mktemp("broker-restart"),
        SY_GATEWAY_RESUBMIT_AFTER_S="15",
        SY_GATEWAY_RESUBMIT_INTERVAL_S="2",
        SY_GATEWAY_RESUBMIT_MAX="20",
        SY_KAFKA_SESSION_TIMEOUT_MS="6000",
        SY_KAFKA_HEARTBEAT_INTERVAL_MS="1000",
    )
    try:
        p.wait_up()
        httpx.post(
            p.base_url + "/chat/completions",
            timeout=120,
            headers=A,
            json={"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        yield p
    finally:
        p.stop()


def _endpoints(stack: Pipeline) -> dict:
    return json.loads(stack.endpoints_path.read_text())


def _envelope(i: int) -> bytes:
    return json.dumps(
        {
            "request_id": f"backlog-{i}",
            "tenant": "tenant-a",
            "kind": "KIND_CHAT",
            "model": "sy-tiny",
            "request": {
                "messages": [{"role": "user", "content": f"count to {i}"}],
                "sampling": {"max_tokens": 4, "temperature": 0},
            },
        }
    ).encode()


async def _async_request(http: httpx.AsyncClient, url: str, rid: str) -> str:
    body = {
        "request_id": rid,
        "endpoint": "/v1/chat/completions",
        "body": {"model": "sy-tiny", "messages": [{"role": "user", "content": rid}], "max_tokens": 4},
    }
    r = await http.post(url + "/v1/requests", json=body, headers=A, timeout=30)
    assert r.status_code in (200, 202), r.text
    return str(r.json()["id"])


async def _final(http: httpx.AsyncClient, url: str, gid: str, deadline: float) -> dict | None:
    while time.monotonic() < deadline:
        try:
            r = await http.get(f"{url}/v1/requests/{gid}", headers=A, timeout=10)
            if r.status_code == 200 and r.json()["status"] not in ("queued", "in_progress"):
                return r.json()
        except httpx.HTTPError:
            pass
        await asyncio.sleep(1)
    return None


async def test_broker_sigkill_under_a_backlog_recovers_on_its_own(
    stack: Pipeline, model_dir: Path, tmp_path: Path
) -> None:
    url = stack.endpoints["services"]["gateway"]["url"]
    registry = stack.endpoints["services"]["registry"]["url"]
    adapter = build_adapter(model_dir, tmp_path / "a", 1)
    files = {
        "adapter_model": ("adapter_model.safetensors", (adapter / "adapter_model.safetensors").read_bytes()),
        "adapter_config": ("adapter_config.json", (adapter / "adapter_config.json").read_bytes()),
    }
    r = httpx.post(registry + "/v1/adapters", data={"name": "survivor"}, files=files, headers=A, timeout=60)
    assert r.status_code in (200, 201), r.text
    bootstrap = stack.endpoints["kafka"]
    adapters_topic = "sy.adapters"

    async with httpx.AsyncClient() as http:
        before = [await _async_request(http, url, f"before-{i}") for i in range(20)]
        await produce(
            bootstrap,
            "sy.requests",
            [_envelope(i) for i in range(500)],
            headers=[("content-type", b"application/json")],
        )
        old_pid = _endpoints(stack)["kafka_pid"]
        os.kill(old_pid, signal.SIGKILL)
        # The launcher restarts the broker (same port) and re-creates the topics.
        t_kill = time.monotonic()
        while _endpoints(stack).get("kafka_pid") in (old_pid, None):
            assert time.monotonic() - t_kill < 60, "the launcher did not restart the broker"
            await asyncio.sleep(0.2)
        t_restart = time.monotonic()

        # New requests complete within 60 s of the restart.
        chat_ok_at = None
        while chat_ok_at is None and time.monotonic() - t_restart < 60:
            try:
                r = await http.post(
                    url + "/v1/chat/completions",
                    headers=A,
                    timeout=15,
                    json={
                        "model": "sy-tiny",
                        "messages": [{"role": "user", "content": "after"}],
                        "max_tokens": 4,
                    },
                )
                if r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length"):
                    chat_ok_at = time.monotonic() - t_restart
            except httpx.HTTPError:
                pass
        assert chat_ok_at is not None, "no chat request completed within 60 s of the broker restart"
        gid = await _async_request(http, url, "after-async")
        res = await _final(http, url, gid, t_restart + 60)
        assert res is not None and res["status"] == "completed", res

        # Everything accepted before the kill: completed, or failed with a reason; none left queued.
        finals = await asyncio.gather(*(_final(http, url, g, time.monotonic() + 240) for g in before))
    lost = [g for g, f in zip(before, finals, strict=True) if f is None]
    assert not lost, f"{len(lost)} accepted requests still queued: {lost[:5]}"
    for f in finals:
        assert f is not None
        assert f["status"] == "completed" or f.get("error", {}).get("message"), f

    # The registry republished its state onto the new, empty sy.adapters.
    events = await collect(bootstrap, adapters_topic, 1, timeout_s=60)
    names = {AdapterEvent.FromString(r.value).name for r in events}
    assert "survivor" in names
    print(f"chat completed {chat_ok_at:.1f} s after the broker restart")
