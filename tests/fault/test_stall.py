"""Ready means flowing: a worker whose engine stops answering turns its /readyz false (issue 32).

The vLLM worker's EngineCore process is SIGSTOPped while requests wait for it: the worker's
process still answers HTTP, its consumer holds records and none finishes. Within
SY_STALL_AFTER_S + 10 s its /readyz is false (check `flowing:vllm_worker`); after SIGCONT the
requests finish and readiness comes back.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STALL_AFTER_S = 10
A = {"Authorization": "Bearer sk-a"}


@pytest.fixture(scope="module")
def stack(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    p = Pipeline(tmp_path_factory.mktemp("stall"), SY_STALL_AFTER_S=str(STALL_AFTER_S))
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


def descendants(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    kids = [int(p) for p in out]
    return kids + [g for k in kids for g in descendants(k)]


def ready(url: str) -> tuple[bool, dict]:
    try:
        r = httpx.get(url + "/readyz", timeout=3)
        return r.status_code == 200, r.json().get("checks", {})
    except httpx.HTTPError:
        return False, {}


async def test_a_stalled_engine_turns_readiness_false_and_back(stack: Pipeline) -> None:
    worker = stack.endpoints["services"]["vllm_worker"]
    url, gateway = worker["url"], stack.endpoints["services"]["gateway"]["url"]
    assert ready(url)[0]
    engine = descendants(worker["pid"])
    assert engine, "the vLLM worker has no engine process"
    for pid in engine:
        os.kill(pid, signal.SIGSTOP)
    try:
        async with httpx.AsyncClient() as http:
            ids = []
            for i in range(4):
                body = {
                    "endpoint": "/v1/chat/completions",
                    "body": {
                        "model": "sy-tiny",
                        "messages": [{"role": "user", "content": f"s{i}"}],
                        "max_tokens": 4,
                    },
                }
                r = await http.post(gateway + "/v1/requests", json=body, headers=A, timeout=30)
                ids.append(r.json()["id"])
        t0 = time.monotonic()
        while ready(url)[0]:
            assert time.monotonic() - t0 < STALL_AFTER_S + 10, "readiness stayed true with the engine stopped"
            await asyncio.sleep(0.5)
        ok, checks = ready(url)
        assert not ok and checks.get("flowing:vllm_worker") is False, checks
    finally:
        for pid in engine:
            os.kill(pid, signal.SIGCONT)
    t1 = time.monotonic()
    while not ready(url)[0]:
        assert time.monotonic() - t1 < 60, f"readiness did not come back: {ready(url)[1]}"
        await asyncio.sleep(0.5)
    async with httpx.AsyncClient() as http:
        for rid in ids:
            for _ in range(60):
                r = await http.get(f"{gateway}/v1/requests/{rid}", headers=A, timeout=10)
                if r.json()["status"] == "completed":
                    break
                await asyncio.sleep(1)
            assert r.json()["status"] == "completed", r.json()
