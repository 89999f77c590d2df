"""broker-capacity: how many ordinary requests the embedded broker holds before its memory or the
latency through it doubles (issue 32, "Broker memory").

The whole stack as `make run` starts it (as the soak does). Ordinary chat requests in rounds
(ROUND_REQUESTS per round, CONCURRENCY at a time, max_tokens 4, every prompt unique so the cache
never answers); after each round the broker's RSS is read (kafka_pid in the stack's
endpoints.json) and a fixed probe of PROBE_REQUESTS requests is sent one at a time for its p50.
It stops at the first round whose probe p50 is twice the first round's, or at the caps
(CAP_REQUESTS requests, CAP_S seconds; SWITCHYARD_CAPACITY_MINUTES overrides the time cap); the
request count at which RSS doubled is reported beside it. The embedded broker's memory storage has no retention
(RUNTIME-NOTES), so its RSS only grows with what the stack writes; production Kafka keeps data
on disk.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from shared.runtime.procs import rss_bytes

from .harness.client import at_most, gateway_client
from .harness.report import pct, slope
from .harness.stack import sy_tiny, var_dir, whole_stack

ROUND_REQUESTS = 1000
CONCURRENCY = 8
MAX_TOKENS = 4
PROBE_REQUESTS = 50
CAP_REQUESTS = 30_000
CAP_S = 40 * 60.0
QUICK = {"round_requests": 100, "probe_requests": 20, "cap_requests": 400, "cap_s": 300.0}
API_KEY = "sk-switchyard-local"


@dataclass(frozen=True)
class Round:
    index: int
    requests: int  # sent to the stack so far, probes included
    errors: int  # so far
    broker_rss_mib: float
    probe_p50_ms: float
    probe_p99_ms: float
    round_s: float


def doubled(first: Round, now: Round) -> list[str]:
    """What has doubled against the first round: "rss", "p50", both or neither."""
    out = []
    if now.broker_rss_mib >= 2 * first.broker_rss_mib:
        out.append("rss")
    if now.probe_p50_ms >= 2 * first.probe_p50_ms:
        out.append("p50")
    return out


def doubling_round(rounds: list[Round]) -> int | None:
    """Index of the first round (after the first) at which RSS or probe p50 has doubled."""
    for r in rounds[1:]:
        if doubled(rounds[0], r):
            return r.index
    return None


def mib_per_1000(rounds: list[Round]) -> float | None:
    """Least-squares slope of broker RSS against requests sent, in MiB per 1,000 requests."""
    per_request = slope([(r.requests, r.broker_rss_mib) for r in rounds])
    return None if per_request is None else round(per_request * 1000, 3)


async def chat(client: httpx.AsyncClient, content: str) -> float | None:
    """One non-streaming chat request; its seconds, None when it failed."""
    body = {
        "model": "sy-tiny",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    t0 = time.perf_counter()
    try:
        r = await client.post("/chat/completions", json=body)
    except httpx.HTTPError:
        return None
    if r.status_code != 200 or not r.json().get("choices"):
        return None
    return time.perf_counter() - t0


async def load_round(client: httpx.AsyncClient, index: int, n: int) -> int:
    """n unique requests, CONCURRENCY at a time; returns how many failed."""
    calls = (chat(client, f"Round {index} request {i}: name one colour and one animal.") for i in range(n))
    return sum(1 for s in await at_most(CONCURRENCY, calls) if s is None)


async def probe(client: httpx.AsyncClient, index: int, n: int) -> tuple[list[float], int]:
    """The fixed probe: n requests one at a time (same shape each round, new words so no cache hit)."""
    ms: list[float] = []
    failed = 0
    for j in range(n):
        s = await chat(client, f"Probe {index:03d}.{j:03d}: say hello in one word.")
        if s is None:
            failed += 1
        else:
            ms.append(s * 1000)
    return ms, failed


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    minutes = os.environ.get("SWITCHYARD_CAPACITY_MINUTES")
    size = (
        QUICK
        if quick
        else {
            "round_requests": ROUND_REQUESTS,
            "probe_requests": PROBE_REQUESTS,
            "cap_requests": CAP_REQUESTS,
            "cap_s": CAP_S,
        }
    )
    if minutes:
        size = {**size, "cap_s": float(minutes) * 60}
    rounds: list[Round] = []
    stopped_by = "cap_requests"
    sent = errors = 0
    rss_doubled_at: int | None = None
    t0 = time.monotonic()
    with whole_stack(sy_tiny(), var_dir(out, "broker-capacity-var")) as stack:
        pid = int(stack.endpoints["kafka_pid"])
        idle_rss = (rss_bytes(pid) or 0) / 2**20
        async with gateway_client(stack.url, API_KEY, CONCURRENCY, timeout_s=120) as client:
            for j in range(3):  # warm-up, counted in what the broker holds
                if await chat(client, f"Warm-up {j}: hello.") is None:
                    errors += 1
            sent += 3
            while True:
                index = len(rounds)
                t_round = time.monotonic()
                errors += await load_round(client, index, size["round_requests"])
                sent += size["round_requests"]
                ms, failed = await probe(client, index, size["probe_requests"])
                errors += failed
                sent += size["probe_requests"]
                rss = rss_bytes(pid)
                if rss is None or not ms:
                    stopped_by = "broker_gone" if rss is None else "probe_failed"
                    break
                rounds.append(
                    Round(
                        index=index,
                        requests=sent,
                        errors=errors,
                        broker_rss_mib=round(rss / 2**20, 1),
                        probe_p50_ms=round(pct(ms, 0.5), 1),
                        probe_p99_ms=round(pct(ms, 0.99), 1),
                        round_s=round(time.monotonic() - t_round, 1),
                    )
                )
                print(f"broker-capacity: {asdict(rounds[-1])}", flush=True)
                what = doubled(rounds[0], rounds[-1]) if len(rounds) > 1 else []
                if "rss" in what and rss_doubled_at is None:
                    rss_doubled_at = sent
                # Memory doubles early from a small first round (~25 MiB) and keeps growing by a
                # fixed amount per request, reported as a slope; the run goes on until the
                # latency through the broker doubles, which is what limits a long-running stack.
                if "p50" in what:
                    stopped_by = "p50_doubled"
                    break
                if sent >= size["cap_requests"]:
                    stopped_by = "cap_requests"
                    break
                if time.monotonic() - t0 >= size["cap_s"]:
                    stopped_by = "cap_time"
                    break
        ep = stack.reread()
    at = doubling_round(rounds)
    restarts = stack.restarts()
    first, last = (rounds[0], rounds[-1]) if rounds else (None, None)
    summary = {
        "stopped_by": stopped_by,
        "rounds": len(rounds),
        "requests": sent,
        "errors": errors,
        "restarts": restarts,
        "broker_restarted": ep.get("kafka_pid") != pid,
        "doubling_round": at,
        "requests_held_at_doubling": rounds[at].requests if at is not None else None,
        "requests_when_rss_doubled": rss_doubled_at,
        "broker_rss_idle_mib": round(idle_rss, 1),
        "broker_rss_first_round_mib": first.broker_rss_mib if first else None,
        "broker_rss_end_mib": last.broker_rss_mib if last else None,
        "broker_rss_mib_per_1000_requests": mib_per_1000(rounds),
        "probe_p50_first_round_ms": first.probe_p50_ms if first else None,
        "probe_p50_end_ms": last.probe_p50_ms if last else None,
        "latency_curve": [[r.requests, r.probe_p50_ms] for r in rounds],
        "rss_curve": [[r.requests, r.broker_rss_mib] for r in rounds],
        "elapsed_s": round(time.monotonic() - t0, 1),
    }
    return {
        "scenario": "broker-capacity",
        "load": {
            **size,
            "concurrency": CONCURRENCY,
            "max_tokens": MAX_TOKENS,
            "stack": "make run (cache on)",
        },
        "rounds": [asdict(r) for r in rounds],
        "summary": summary,
    }
