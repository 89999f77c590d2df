"""replies: the bytes each gateway replica reads per request, with 1 and with 3 replicas.

Each replica names its own partition of sy.responses/sy.stream in `reply_to` (reply_lease.py),
so what it reads should stay flat as replicas are added. The same load (streamed 16-token chat
requests, spread round-robin over the replicas) runs on one gateway, then on three; then on
three replicas that read every reply (two of them without the shared store, so without a
reply partition: how every replica read before), for contrast. Read from each replica's
`sy_gateway_reply_bytes_read_total` / `_records_read_total`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from .harness.replicas import Replica, counter
from .harness.stack import pipeline, sy_tiny, var_dir

BYTES = "sy_gateway_reply_bytes_read_total"
RECORDS = "sy_gateway_reply_records_read_total"
KEY = {"Authorization": "Bearer sk-switchyard-local"}


async def load(urls: list[str], n: int, concurrency: int = 8) -> dict[str, int]:
    """n streamed requests, round-robin over the gateways; requests answered per gateway."""
    sem = asyncio.Semaphore(concurrency)
    done = dict.fromkeys(urls, 0)

    async def one(client: httpx.AsyncClient, i: int) -> None:
        url = urls[i % len(urls)]
        body = {
            "model": "sy-tiny",
            "messages": [{"role": "user", "content": f"Reverse: word{i}"}],
            "max_tokens": 16,
            "stream": True,
        }
        async with sem:
            async with client.stream("POST", url + "/v1/chat/completions", json=body, headers=KEY) as r:
                async for _ in r.aiter_lines():
                    pass
                if r.status_code == 200:
                    done[url] += 1

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(one(client, i) for i in range(n)))
    return done


async def measure(urls: list[str], n: int) -> dict[str, Any]:
    before = {u: (counter(u, BYTES), counter(u, RECORDS)) for u in urls}
    t0 = time.perf_counter()
    served = await load(urls, n)
    wall = time.perf_counter() - t0
    await asyncio.sleep(1.0)  # the last deltas
    per = []
    for u in urls:
        b = counter(u, BYTES) - before[u][0]
        r = counter(u, RECORDS) - before[u][1]
        per.append(
            {
                "requests": served[u],
                "bytes_read": int(b),
                "records_read": int(r),
                "bytes_per_own_request": round(b / max(1, served[u]), 1),
            }
        )
    total_bytes = sum(x["bytes_read"] for x in per)
    return {
        "replicas": len(urls),
        "requests": n,
        "answered": sum(served.values()),
        "wall_s": round(wall, 2),
        "per_replica": per,
        "bytes_per_request_per_replica": round(max(x["bytes_per_own_request"] for x in per), 1),
        "bytes_read_per_request_all_replicas": round(total_bytes / max(1, n), 1),
    }


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    n = 60 if quick else 300
    var = var_dir(out, "replies-var")
    results: dict[str, Any] = {}
    # Four partitions per topic (the embedded broker's default is one): room for 3 reply homes.
    with pipeline(sy_tiny(), var, SY_TOPIC_PARTITIONS="4") as stack:
        first = stack.url.rsplit("/v1", 1)[0]
        await load([first], 8)  # warm-up
        results["one_replica"] = await measure([first], n)
        extra = [Replica(stack.endpoints, var, "gateway", n=i) for i in (2, 3)]
        try:
            for r in extra:
                r.wait_ready()
            await asyncio.sleep(6)  # the first replica's next lease renewal lets their partitions go
            await load([first, *(r.url for r in extra)], 12)
            results["three_replicas"] = await measure([first, *(r.url for r in extra)], n)
        finally:
            for r in extra:
                r.stop()
        # Contrast: replicas without the shared store have no reply partition and read everything.
        await asyncio.sleep(6)
        extra = [Replica(stack.endpoints, var, "gateway", n=i, SY_GATEWAY_STATE_URL="") for i in (4, 5)]
        try:
            for r in extra:
                r.wait_ready()
            await load([first, *(r.url for r in extra)], 12)
            results["three_replicas_reading_everything"] = await measure([first, *(r.url for r in extra)], n)
        finally:
            for r in extra:
                r.stop()
    one = results["one_replica"]["bytes_per_request_per_replica"]
    three = results["three_replicas"]["bytes_per_request_per_replica"]
    every = results["three_replicas_reading_everything"]["bytes_per_request_per_replica"]
    results["summary"] = {
        "bytes_per_request_per_replica_1": one,
        "bytes_per_request_per_replica_3": three,
        "ratio_3_vs_1": round(three / one, 2) if one else None,
        "bytes_per_request_per_replica_3_reading_everything": every,
        "ratio_reading_everything_vs_1": round(every / one, 2) if one else None,
    }
    return results
