"""The streaming chat workload the serving scenarios send, and the summary of one level of it.

Requests are read the way vLLM's serving benchmark reads them: raw HTTP, the SSE lines parsed as
they come, TTFT at the first chunk with content. (The `openai` client parses every chunk into
pydantic models: ~2.7 ms more per TTFT measured here, and CPU on the cores the system under test
uses. The e2e tests use it unchanged.)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import httpx

from shared.devstack.models import tasks

from .report import pct

MAX_TOKENS = 64
T = TypeVar("T")


def prompts(n: int) -> list[list[dict[str, str]]]:
    """n chat prompts from the checkable tasks, the same ones every run."""
    rng = random.Random(11)
    return [
        [{"role": "user", "content": tasks.sample(tasks.TASKS[i % len(tasks.TASKS)], rng).prompt}]
        for i in range(n)
    ]


_FRESH = itertools.count()


def fresh_prompts(n: int) -> list[list[dict[str, str]]]:
    """n chat prompts never sent before in this process: no two are the same question (their
    numbers differ), so none can be a cache hit of another, exact or semantic."""
    out = []
    for _ in range(n):
        i = next(_FRESH)
        out.append([{"role": "user", "content": f"What is {1000 + i} plus {(7919 * i) % 100003}?"}])
    return out


def level_summary(
    concurrency: int, n: int, wall: float, tokens: int, ttfts_ms: list[float]
) -> dict[str, Any]:
    """One workload level as every side of pipeline-vs-engine reports it."""
    return {
        "concurrency": concurrency,
        "requests": n,
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_p50_ms": round(pct(ttfts_ms, 0.5), 2),
        "ttft_p99_ms": round(pct(ttfts_ms, 0.99), 2),
    }


def gateway_client(
    base_url: str, api_key: str, concurrency: int = 8, timeout_s: float = 300
) -> httpx.AsyncClient:
    """An HTTP client for the gateway (or vLLM's server) with room for `concurrency` streams."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=timeout_s,
        limits=httpx.Limits(max_connections=concurrency + 2),
    )


async def at_most(concurrency: int, calls: Iterable[Awaitable[T]]) -> list[T]:
    """Every call awaited, `concurrency` at a time; the results in the calls' order."""
    sem = asyncio.Semaphore(concurrency)

    async def guarded(call: Awaitable[T]) -> T:
        async with sem:
            return await call

    return list(await asyncio.gather(*(guarded(c) for c in calls)))


async def one(
    client: httpx.AsyncClient,
    messages: list[dict[str, str]],
    headers: dict[str, str] | None = None,
    *,
    model: str = "sy-tiny",
    max_tokens: int = MAX_TOKENS,
) -> dict[str, Any]:
    """One streaming chat request of exactly max_tokens tokens; TTFT, tokens, seconds and the
    `switchyard` object of the final chunk (breakdown, worker)."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    ttft = None
    tokens = 0
    info = None
    async with client.stream("POST", "/chat/completions", json=body, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            choices = chunk.get("choices") or []
            if ttft is None and choices and (choices[0].get("delta") or {}).get("content"):
                ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
                info = chunk.get("switchyard")
    return {"ttft_s": ttft, "tokens": tokens, "seconds": time.perf_counter() - t0, "switchyard": info}


def breakdown_p50(results: list[dict[str, Any]]) -> dict[str, float]:
    """p50 of each top-level breakdown row (Kafka hops named `hop:<topic>`) over the requests."""
    rows: dict[str, list[float]] = {}
    for r in results:
        for row in (r["switchyard"] or {}).get("breakdown", []):
            name = row["stage"] if row["stage"] != "queue" else f"hop:{row['topic']}"
            if "parent" not in row:
                rows.setdefault(name, []).append(float(row["duration_ms"]))
    return {k: round(statistics.median(v), 3) for k, v in rows.items()}


async def workload(
    base_url: str,
    api_key: str,
    concurrency: int,
    n: int,
    headers: Callable[[], dict[str, str]] | None = None,
    warm_up: bool = True,
) -> dict[str, Any]:
    """n streaming requests, `concurrency` at a time; `headers` makes each request's extra headers."""
    client = gateway_client(base_url, api_key, concurrency)
    ps = prompts(n)
    for p in ps[:2] if warm_up else []:  # warm-up, not measured
        await one(client, p)
    t0 = time.perf_counter()
    results = await at_most(concurrency, (one(client, p, headers() if headers else None) for p in ps))
    wall = time.perf_counter() - t0
    ttfts = [r["ttft_s"] * 1000 for r in results if r["ttft_s"] is not None]
    out = level_summary(concurrency, n, wall, sum(r["tokens"] for r in results), ttfts)
    hops = breakdown_p50(results)
    if hops:
        out["breakdown_p50_ms"] = hops
    await client.aclose()
    return out
