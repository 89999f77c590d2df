"""capacity: the request rate one gateway plus the pipeline sustains with a near-free engine, against
vLLM's own OpenAI server on the same workload; and the async accept rate against a minimal
FastAPI endpoint (issue #36).

The engine is made nearly free: sy-tiny with `max_tokens=1`, unstreamed, so what is measured is
what a request costs on its way through. Load is open-loop (requests sent on a fixed schedule,
whatever the answers do), stepping the offered rate up by √2 each STEP_S seconds, then narrowing
the rate between the last step that held and the first that did not by REFINE geometric halvings. The first step's
p99 is the unloaded latency; a step holds when every request succeeds, the answered rate keeps up
with the offered one (≥ 95 %) and p99 stays within twice the unloaded p99. The capacity is the
answered rate of the last step that held.

Cases: cache off; cache on with unique prompts (every request a miss); cache on with every request
a hit (a small set of prompts answered once, then repeated). The anchor is vLLM's server with
unique prompts. Targets: ≥ 0.5x the anchor's rate with the cache off, ≥ 0.35x with unique
prompts through the cache, no request lost in any case.

Async accept rate: `POST /v1/requests` at concurrency 32 against the gateway with only the broker
behind it, counted until each is accepted (202); then the broker's log must hold a record for
every accepted request. Beside it the same client against loadtests/harness/minimal_app.py
(pydantic body, 202, nothing else) under one uvicorn worker. Target: ≥ 0.5x its rate. For
information, the same submissions to the whole stack, which answers them on the same two cores
while they arrive; every accepted request is then polled until it is answered.

The load generator runs on the same cores as what it measures, on both sides alike.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from loadtests.harness.broker import log_ends, written_since
from loadtests.harness.client import at_most, fresh_prompts
from loadtests.harness.report import pct
from loadtests.harness.stack import forget_cache_entries, pipeline, sy_tiny, var_dir
from loadtests.pipeline import API_KEY, start_vllm_server, wait_http
from shared.runtime.procs import free_port, stop_process

FIRST_RATE = 4.0
MAX_RATE = 1024.0
P99_FACTOR = 2.0
KEEP_UP = 0.95
TARGET_CACHE_OFF = 0.5
TARGET_CACHE_ON = 0.35
TARGET_ACCEPT = 0.5
HIT_SET = 32
BASE_STEPS = 3
REFINE = 2  # halvings between the last step that held and the first that did not
Body = Callable[[int], dict[str, Any]]


def client_for(url: str, api_key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=60,
        limits=httpx.Limits(max_connections=2000, max_keepalive_connections=256),
    )


def chat_body(messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"model": "sy-tiny", "messages": messages, "max_tokens": 1, "temperature": 0}


def unique_bodies() -> Body:
    """Each request a question never sent before (loadtests.harness.client.fresh_prompts)."""
    return lambda i: chat_body(fresh_prompts(1)[0])


def hit_bodies(pool: list[list[dict[str, str]]]) -> Body:
    """Request i: one of a few prompts answered before, so each is a cache hit."""
    return lambda i: chat_body(pool[i % len(pool)])


async def _timed(client: httpx.AsyncClient, body: dict[str, Any], path: str) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    try:
        r = await client.post(path, json=body)
        code = r.status_code
    except httpx.HTTPError:
        code = 0
    t1 = time.perf_counter()
    return t0, t1, code


async def open_loop(
    client: httpx.AsyncClient, rate: float, seconds: float, body: Body, start: int = 0
) -> dict[str, Any]:
    """Requests sent every 1/rate s for `seconds` whatever the answers do; what came back."""
    n = max(4, int(rate * seconds))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    tasks = []
    for i in range(n):
        delay = t0 + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_timed(client, body(start + i), "/chat/completions")))
    results = await asyncio.gather(*tasks)
    ok = [(a, b) for a, b, code in results if code == 200]
    lost = sum(1 for _, _, code in results if code == 0)
    first = min(a for a, _, _ in results)
    last = max(b for _, b, _ in results)
    lat = [(b - a) * 1000 for a, b in ok]
    return {
        "offered_rps": round(rate, 1),
        "requests": n,
        "failed": n - len(ok),
        "refused": n - len(ok) - lost,
        "lost": lost,
        "answered_rps": round(len(ok) / (last - first), 1),
        "p50_ms": round(pct(lat, 0.5), 1) if lat else None,
        "p99_ms": round(pct(lat, 0.99), 1) if lat else None,
    }


def _holds(step: dict[str, Any], rate: float, base_p99: float) -> bool:
    return (
        step["failed"] == 0
        and step["answered_rps"] >= KEEP_UP * rate
        and (step["p99_ms"] or float("inf")) <= P99_FACTOR * base_p99
    )


async def ramp(url: str, api_key: str, body: Body, step_s: float) -> dict[str, Any]:
    """Offered rate up by √2 per step until a step fails to hold twice in a row (one p99 over a
    few dozen requests is noisy); the unloaded p99 is the median of the first BASE_STEPS steps'."""
    steps: list[dict[str, Any]] = []
    capacity = 0.0
    rate = FIRST_RATE
    sent = 0
    async with client_for(url, api_key) as client:
        for m in range(3):  # warm-up
            await _timed(client, body(10**6 + m), "/chat/completions")
        while rate <= MAX_RATE:
            step = await open_loop(client, rate, step_s, body, sent)
            sent += step["requests"]
            steps.append(step)
            base = [s["p99_ms"] or float("inf") for s in steps[:BASE_STEPS]]
            base_p99 = statistics.median(base)
            if len(steps) <= BASE_STEPS:
                step["held"] = step["failed"] == 0 and step["answered_rps"] >= KEEP_UP * rate
            else:
                step["held"] = _holds(step, rate, base_p99)
            if not step["held"]:  # once more at the same rate before calling it
                retry = await open_loop(client, rate, step_s, body, sent)
                sent += retry["requests"]
                retry["retry_of"] = round(rate, 1)
                retry["held"] = _holds(retry, rate, base_p99)
                steps.append(retry)
                if not retry["held"]:
                    break
                step = retry
            capacity = step["answered_rps"]
            rate *= math.sqrt(2)
        # Between the last rate that held and the first that did not, REFINE geometric halvings.
        low, high = rate / math.sqrt(2), rate
        for _ in range(REFINE if steps and not steps[-1]["held"] and len(steps) > BASE_STEPS else 0):
            mid = math.sqrt(low * high)
            step = await open_loop(client, mid, step_s, body, sent)
            sent += step["requests"]
            step["refine"] = True
            step["held"] = _holds(step, mid, base_p99)
            steps.append(step)
            if step["held"]:
                low, capacity = mid, max(capacity, step["answered_rps"])
            else:
                high = mid
    return {
        "capacity_rps": capacity,
        "unloaded_p99_ms": base_p99,
        "refused": sum(s["refused"] for s in steps),
        "lost": sum(s["lost"] for s in steps),
        "steps": steps,
    }


async def accept_rate(url: str, api_key: str, n: int, poll: bool, concurrency: int = 32) -> dict[str, Any]:
    """n async submissions at `concurrency`; accepted/s; then (poll) each polled until answered."""
    async with client_for(url, api_key) as client:
        body = lambda i: {  # noqa: E731
            "endpoint": "/v1/chat/completions",
            "body": chat_body([{"role": "user", "content": fresh_prompts(1)[0][0]["content"]}]),
        }

        async def submit(i: int) -> str | None:
            try:
                r = await client.post("/requests", json=body(i))
            except httpx.HTTPError:
                return None
            return r.json().get("id") if r.status_code in (200, 202) else None

        t0 = time.perf_counter()
        ids = await at_most(concurrency, (submit(i) for i in range(n)))
        wall = time.perf_counter() - t0
        out: dict[str, Any] = {
            "submitted": n,
            "accepted": sum(1 for i in ids if i),
            "accepted_per_s": round(sum(1 for i in ids if i) / wall, 1),
        }
        if poll:
            pending = {i for i in ids if i}
            deadline = time.monotonic() + 600
            answered = failed = 0
            while pending and time.monotonic() < deadline:
                for rid in list(pending):
                    r = await client.get(f"/requests/{rid}")
                    status = r.json().get("status") if r.status_code == 200 else None
                    if status in ("completed", "failed"):
                        pending.discard(rid)
                        answered += status == "completed"
                        failed += status == "failed"
                if pending:
                    await asyncio.sleep(1)
            out.update(completed=answered, failed=failed, lost=len(pending))
        return out


async def queued_accepts(url: str, bootstrap: str, n: int) -> dict[str, Any]:
    """n async submissions to a gateway running alone; every accepted one counted in the broker's
    log (what the gateway wrote, heartbeats aside): `lost` is accepted but not there."""
    starts = await log_ends(bootstrap)
    got = await accept_rate(url, API_KEY, n, poll=False)
    written = await written_since(bootstrap, starts)
    got["records_in_broker"] = sum(v["records"] for k, v in written.items() if "heartbeats" not in k)
    got["lost"] = max(0, got["accepted"] - got["records_in_broker"])
    return got


@contextmanager
def minimal_app() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "loadtests.harness.minimal_app:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 60)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(proc, timeout_s=10)


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    model_dir = sy_tiny()
    var = var_dir(out, "capacity-var")
    step_s = 2.0 if quick else 5.0
    accepts = 300 if quick else 2000
    proc, url = start_vllm_server(model_dir, var)
    try:
        anchor = await ramp(url, "none", unique_bodies(), step_s)
    finally:
        stop_process(proc, timeout_s=30)
    cases: dict[str, Any] = {}
    with pipeline(model_dir, var, cache=False, stop_timeout_s=90, SY_TENANT_MAX_QUEUED="100000") as stack:
        cases["cache_off"] = await ramp(stack.url, API_KEY, unique_bodies(), step_s)
        answering = await accept_rate(stack.url, API_KEY, accepts, poll=True)
    # Accepted and durably queued: the gateway and the broker alone, then every accepted request
    # counted in the broker's log (nothing downstream runs to compete for the cores).
    with pipeline(
        model_dir, var, cache=False, services=["gateway"], stop_timeout_s=60, SY_TENANT_MAX_QUEUED="100000"
    ) as stack:
        queued = await queued_accepts(stack.url, str(stack.endpoints["kafka"]), accepts)
    forget_cache_entries(var)  # "unique" prompts must be new to this cache, not last run's
    with pipeline(model_dir, var, cache=True, stop_timeout_s=90) as stack:
        cases["cache_on_unique"] = await ramp(stack.url, API_KEY, unique_bodies(), step_s)
        pool = fresh_prompts(HIT_SET)
        async with client_for(stack.url, API_KEY) as client:  # answer each once: then they are hits
            for m in pool:
                await client.post("/chat/completions", json=chat_body(m))
        await asyncio.sleep(1)
        cases["cache_on_all_hits"] = await ramp(stack.url, API_KEY, hit_bodies(pool), step_s)
    with minimal_app() as murl:
        minimal = await accept_rate(murl, "none", accepts, poll=False)
    a = anchor["capacity_rps"] or float("nan")
    summary = {
        "anchor_vllm_server_rps": anchor["capacity_rps"],
        **{f"{k}_rps": v["capacity_rps"] for k, v in cases.items()},
        "cache_off_vs_anchor": round(cases["cache_off"]["capacity_rps"] / a, 3),
        "cache_off_target": TARGET_CACHE_OFF,
        "cache_on_unique_vs_anchor": round(cases["cache_on_unique"]["capacity_rps"] / a, 3),
        "cache_on_unique_target": TARGET_CACHE_ON,
        "cache_on_all_hits_vs_anchor": round(cases["cache_on_all_hits"]["capacity_rps"] / a, 3),
        "refused": sum(c["refused"] for c in cases.values()),
        "lost": sum(c["lost"] for c in cases.values()) + answering.get("lost", 0) + queued["lost"],
        "async_accepted_per_s": queued["accepted_per_s"],
        "minimal_fastapi_accepted_per_s": minimal["accepted_per_s"],
        "async_accept_vs_minimal": round(queued["accepted_per_s"] / minimal["accepted_per_s"], 3),
        "async_accepted_per_s_while_answering": answering["accepted_per_s"],
        "async_accept_target": TARGET_ACCEPT,
    }
    summary["pass"] = {
        "cache_off": summary["cache_off_vs_anchor"] >= TARGET_CACHE_OFF,
        "cache_on_unique": summary["cache_on_unique_vs_anchor"] >= TARGET_CACHE_ON,
        "async_accept": summary["async_accept_vs_minimal"] >= TARGET_ACCEPT,
        "nothing_lost": summary["lost"] == 0,
    }
    return {
        "scenario": "capacity",
        "workload": {"max_tokens": 1, "stream": False, "step_s": step_s, "p99_factor": P99_FACTOR},
        "vllm_openai_server": anchor,
        **{f"switchyard_{k}": v for k, v in cases.items()},
        "async_accept": {
            "gateway_and_broker": queued,
            "whole_stack_answering": answering,
            "minimal_fastapi": minimal,
        },
        "summary": summary,
    }
