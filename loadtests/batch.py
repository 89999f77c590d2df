"""batch: an N-line batch job (OpenAI Batch API through the gateway) vs the same requests sent
interactively (chat completions, as many at once as the batch window), in one pipeline, one run.

Reports lines/s and the time to the first result of each: for the batch, from `POST /v1/batches`
until its request_counts show the first completed line; interactively, from the first request
sent until the first response came back. The job runs twice: with Celery on the embedded Redis
(the default) and on its SQLite fallback, each on a fresh stack. `python -m loadtests batch --batch-lines 2000`.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import time
from pathlib import Path
from typing import Any

import openai

from shared.devstack.models import tasks

from .harness.report import pct, write_result
from .harness.stack import pipeline, sy_tiny, var_dir

MAX_TOKENS = 16
DEFAULT_LINES = 2000


def requests(n: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    return [
        {
            "model": "sy-tiny",
            "messages": [
                {"role": "user", "content": tasks.sample(tasks.TASKS[i % len(tasks.TASKS)], rng).prompt}
            ],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
        }
        for i in range(n)
    ]


async def interactive(
    client: openai.AsyncOpenAI, bodies: list[dict[str, Any]], concurrency: int
) -> dict[str, Any]:
    sem = asyncio.Semaphore(concurrency)
    t0 = time.perf_counter()
    first: list[float] = []
    lat: list[float] = []
    errors = 0

    async def one(body: dict[str, Any]) -> None:
        nonlocal errors
        async with sem:
            s = time.perf_counter()
            try:
                await client.chat.completions.create(**body)
            except openai.APIError:
                errors += 1
                return
            now = time.perf_counter()
            lat.append(now - s)
            if not first:
                first.append(now - t0)

    await asyncio.gather(*(one(b) for b in bodies))
    wall = time.perf_counter() - t0
    return {
        "lines": len(bodies),
        "errors": errors,
        "concurrency": concurrency,
        "wall_s": round(wall, 3),
        "lines_per_s": round((len(bodies) - errors) / wall, 2),
        "time_to_first_result_s": round(first[0], 3) if first else None,
        "latency_p50_s": round(pct(lat, 0.5), 3),
        "latency_p99_s": round(pct(lat, 0.99), 3),
    }


async def batch(client: openai.AsyncOpenAI, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    data = "".join(
        json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions", "body": b}) + "\n"
        for i, b in enumerate(bodies)
    ).encode()
    f = await client.files.create(file=("bench.jsonl", io.BytesIO(data)), purpose="batch")
    t0 = time.perf_counter()
    b = await client.batches.create(
        input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    first = None
    while b.status not in ("completed", "failed", "expired", "cancelled"):
        await asyncio.sleep(0.05)
        b = await client.batches.retrieve(b.id)
        if first is None and b.request_counts and b.request_counts.completed > 0:
            first = time.perf_counter() - t0
    wall = time.perf_counter() - t0
    out = (await client.files.content(b.output_file_id)).text if b.output_file_id else ""
    ids = [json.loads(x)["custom_id"] for x in out.splitlines() if x.strip()]
    return {
        "lines": len(bodies),
        "status": b.status,
        "completed": b.request_counts.completed if b.request_counts else 0,
        "failed": b.request_counts.failed if b.request_counts else 0,
        "output_lines": len(ids),
        "duplicate_lines": len(ids) - len(set(ids)),
        "wall_s": round(wall, 3),
        "lines_per_s": round(len(ids) / wall, 2),
        "time_to_first_result_s": round(first, 3) if first is not None else None,
        "file_bytes": len(data),
    }


async def run(out: Path, quick: bool = False, lines: int | None = None) -> dict[str, Any]:
    from shared.runtime.config import Settings

    n = lines or (200 if quick else DEFAULT_LINES)
    window = Settings.model_fields["batch_max_in_flight"].default
    var = var_dir(out, "batch-var")
    bodies = requests(n)
    with pipeline(sy_tiny(), var) as stack:  # Celery on the embedded Redis, the default
        client = openai.AsyncOpenAI(
            base_url=stack.url, api_key="sk-switchyard-local", max_retries=0, timeout=600
        )
        for b in requests(4):  # warm-up: consumer groups settle, engine warm
            await client.chat.completions.create(**b)
        b_res = await batch(client, bodies)
        i_res = await interactive(client, bodies, window)
        await client.close()
    # The same job with Celery on its SQLite fallback (kombu's SQLAlchemy transport).
    sqlite = var / "celery-sqlite" / "broker.sqlite"
    sqlite.parent.mkdir(parents=True, exist_ok=True)
    sqlite.unlink(missing_ok=True)
    with pipeline(sy_tiny(), var, SY_CELERY_BROKER=f"sqla+sqlite:///{sqlite}") as stack:
        client = openai.AsyncOpenAI(
            base_url=stack.url, api_key="sk-switchyard-local", max_retries=0, timeout=600
        )
        for b in requests(4):
            await client.chat.completions.create(**b)
        s_res = await batch(client, bodies)
        await client.close()
    summary = {
        "lines": n,
        "batch_lines_per_s": b_res["lines_per_s"],
        "interactive_lines_per_s": i_res["lines_per_s"],
        "batch_vs_interactive_throughput": round(b_res["lines_per_s"] / i_res["lines_per_s"], 3)
        if i_res["lines_per_s"]
        else None,
        "batch_time_to_first_result_s": b_res["time_to_first_result_s"],
        "interactive_time_to_first_result_s": i_res["time_to_first_result_s"],
        "batch_every_line_once": b_res["output_lines"] == n and b_res["duplicate_lines"] == 0,
        "celery_redis_lines_per_s": b_res["lines_per_s"],
        "celery_sqlite_lines_per_s": s_res["lines_per_s"],
        "celery_redis_time_to_first_result_s": b_res["time_to_first_result_s"],
        "celery_sqlite_time_to_first_result_s": s_res["time_to_first_result_s"],
        "celery_sqlite_every_line_once": s_res["output_lines"] == n and s_res["duplicate_lines"] == 0,
    }
    return {
        "scenario": "batch",
        "workload": {"max_tokens": MAX_TOKENS, "temperature": 0, "batch_window": window, "cache": "off"},
        "batch": b_res,
        "batch_celery_sqlite": s_res,
        "interactive": i_res,
        "summary": summary,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="loadtests.batch")
    ap.add_argument("--batch-lines", type=int, default=DEFAULT_LINES)
    ap.add_argument("--out", type=Path, default=Path("var/bench"))
    a = ap.parse_args()
    res = asyncio.run(run(a.out, lines=a.batch_lines))
    write_result(a.out, "batch", res)
    print(json.dumps(res["summary"], indent=2))
