"""Drive a running stack with a scenario and record everything the report needs (no analysis here).

Requests go through the gateway's OpenAI API (streaming SSE by default): per request the client's
TTFT and chunk gaps, status, and the `switchyard` section of the reply (per-stage breakdown, pool,
cache). Meanwhile every service's `/metrics` (and the cache's stats) is sampled once a second:
consumer lag, in-flight, engine queue and KV use, process CPU and memory.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from shared.devstack.models import tasks
from shared.runtime.admin import admin_headers
from shared.runtime.config import load_settings

from .scenarios import Scenario

# Series kept from each service's /metrics (name -> label keys kept; summed over the rest).
SAMPLED: dict[str, tuple[str, ...]] = {
    "sy_consumer_lag": ("stage",),
    "sy_in_flight": ("stage",),
    "sy_records_total": ("stage", "outcome"),
    "sy_errors_total": ("stage", "code"),
    "process_cpu_seconds_total": (),
    "process_resident_memory_bytes": (),
    "vllm:num_requests_waiting": (),
    "vllm:num_requests_running": (),
    "vllm:kv_cache_usage_perc": (),
    "vllm:num_preemptions_total": (),
}


def tiny_png(w: int = 32, h: int = 32) -> str:
    """A valid RGB PNG (a gradient) as base64: the smallest image part that exercises the media path."""
    raw = b"".join(
        b"\x00" + bytes((x * 8 % 256, y * 8 % 256, 128)[c] for x in range(w) for c in range(3))
        for y in range(h)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def parse_metrics(text: str) -> dict[str, float]:
    """Selected series as "name{k=v,...}" -> value (the Prometheus text parser)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            keep = SAMPLED.get(s.name)
            if keep is None:
                continue
            labels = ",".join(f"{k}={s.labels[k]}" for k in keep if k in s.labels)
            key = f"{s.name}{{{labels}}}"
            out[key] = out.get(key, 0.0) + float(s.value)
    return out


class Generator:
    """Request bodies of a scenario: task prompts, filler, repeats for cache hits, adapters, media."""

    def __init__(self, sc: Scenario) -> None:
        self.sc, self.rng = sc, random.Random(sc.seed)
        # Requests answered so far, as sent: a repeat sends one of them again exactly (the same
        # model, adapter, max_tokens and media), so the cache can answer it.
        self.done: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.n = 0

    def answered(self, body: dict[str, Any], meta: dict[str, Any]) -> None:
        self.done.append((body, meta))

    def next(self) -> tuple[dict[str, Any], dict[str, Any]]:
        sc, rng = self.sc, self.rng
        self.n += 1
        if self.done and rng.random() < sc.cache_hit_ratio:
            body, meta = rng.choice(self.done)
            return copy.deepcopy(body), {**meta, "repeat": True}
        ex = tasks.sample(rng.choice(tasks.TASKS), rng)
        filler = " ".join(
            rng.choice(["lorem", "ipsum", "data", "note"]) for _ in range(rng.randint(*sc.prompt_words))
        )
        text = f"{filler}\n{ex.prompt}" if filler else ex.prompt
        names, weights = zip(*sc.adapter_mix.items(), strict=True)
        model = rng.choices(names, weights)[0] or sc.model
        media = rng.random() < sc.media_share
        content: Any = text
        if media:
            content = [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{tiny_png()}"}},
            ]
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": rng.randint(*sc.max_tokens),
            "temperature": 0,
            "stream": sc.stream,
        }
        if sc.stream:
            body["stream_options"] = {"include_usage": True}
        return body, {"text": text, "repeat": False, "model": model, "media": media}


async def one(http: httpx.AsyncClient, url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    t0 = time.time()
    p0 = time.perf_counter()
    rec: dict[str, Any] = {"start": t0, "status": 0, "ttft_ms": None, "chunk_gaps_ms": [], "tokens": 0}
    try:
        if not body["stream"]:
            r = await http.post(url, json=body, headers={"authorization": f"Bearer {key}"})
            rec["status"] = r.status_code
            data = r.json()
            if r.status_code == 200:  # unstreamed: the client sees no first token apart (ttft stays None)
                rec["tokens"] = data.get("usage", {}).get("completion_tokens", 0)
                rec["switchyard"] = data.get("switchyard")
            else:
                rec["error"] = data.get("error", {}).get("message", r.text[:200])
        else:
            async with http.stream("POST", url, json=body, headers={"authorization": f"Bearer {key}"}) as r:
                rec["status"] = r.status_code
                if r.status_code != 200:
                    rec["error"] = (await r.aread()).decode(errors="replace")[:300]
                else:
                    last = None
                    async for line in r.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        chunk = json.loads(line[6:])
                        now = time.perf_counter()
                        if chunk.get("error"):
                            rec["error"] = chunk["error"].get("message", "")
                        if any((c.get("delta") or {}).get("content") for c in chunk.get("choices", [])):
                            if rec["ttft_ms"] is None:
                                rec["ttft_ms"] = (now - p0) * 1000
                            elif last is not None:
                                rec["chunk_gaps_ms"].append((now - last) * 1000)
                            last = now
                        if chunk.get("usage"):
                            rec["tokens"] = chunk["usage"].get("completion_tokens", 0)
                            rec["switchyard"] = chunk.get("switchyard")
    except httpx.HTTPError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["e2e_ms"] = (time.perf_counter() - p0) * 1000
    rec["end"] = time.time()
    return rec


async def sample_metrics(
    http: httpx.AsyncClient, services: dict[str, str], samples: list[dict[str, Any]], stop: asyncio.Event
) -> None:
    admin = admin_headers(
        load_settings()
    )  # /metrics and cache stats are admin paths (shared/runtime/admin.py)
    while services and not stop.is_set():
        t = time.time()
        for name, base in services.items():
            row: dict[str, Any] = {"t": t, "service": name}
            try:
                row["series"] = parse_metrics(
                    (await http.get(f"{base}/metrics", headers=admin, timeout=2)).text
                )
                if name == "cache":
                    stats = (await http.get(f"{base}/v1/cache/stats", headers=admin, timeout=2)).json()
                    row["cache"] = {
                        k: stats.get(k) for k in ("lookups", "hits_exact", "hits_semantic", "bypassed")
                    }
            except (httpx.HTTPError, ValueError) as exc:
                row["error"] = repr(exc)[:200]
            samples.append(row)
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except TimeoutError:
            pass


async def run(
    sc: Scenario,
    gateway: str,
    services: dict[str, str],
    api_key: str,
    progress: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the scenario for its duration; returns the recorded run (what `report` reads). `extra`
    goes into the record as it is (the client's tenant, the overrides, where metrics came from)."""
    gen = Generator(sc)
    records: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    stop = asyncio.Event()
    url = f"{gateway}/v1/chat/completions"
    limits = httpx.Limits(max_connections=max(sc.concurrency, 64))
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        sampler = asyncio.create_task(sample_metrics(http, services, samples, stop))
        t_end = time.monotonic() + sc.duration_s
        started = time.time()

        async def send() -> None:
            body, meta = gen.next()
            rec = await one(http, url, api_key, copy.deepcopy(body))
            rec.update(meta)
            if rec["status"] == 200 and "error" not in rec and not meta["repeat"]:
                gen.answered(body, meta)
            records.append(rec)
            if progress:
                print(f"\r{len(records)} requests", end="", flush=True)

        if sc.mode == "concurrency":

            async def loop() -> None:
                while time.monotonic() < t_end:
                    await send()

            await asyncio.gather(*(loop() for _ in range(sc.concurrency)))
        else:
            pending: set[asyncio.Task[None]] = set()
            rng = random.Random(sc.seed + 1)
            while time.monotonic() < t_end:
                task = asyncio.create_task(send())
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(rng.expovariate(sc.rate_rps))
            if pending:
                await asyncio.wait(pending)
        stop.set()
        await sampler
    if progress:
        print()
    return {
        **(extra or {}),
        "scenario": sc.model_dump(),
        "gateway": gateway,
        "started": started,
        "finished": time.time(),
        "requests": records,
        "samples": samples,
    }


def save(run_data: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "run.json"
    path.write_text(json.dumps(run_data))
    return path
