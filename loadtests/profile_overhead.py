"""profile-overhead: what tracing costs, measured in one run of one stack.

The stack runs as `make run` does (every trace sampled, spans to the JSONL sink). Each request
carries a W3C `traceparent`; the gateway continues the client's trace and keeps its sampled flag,
so a `-01` request is traced through every stage and a `-00` request records no span anywhere:
tracing on and off differ in nothing else. Blocks of each alternate on/off, off/on, … (ABBA), so
drift of the machine (warm-up, page cache, the broker's growing log) hits both alike, and each
round gives a paired throughput ratio. The per-request breakdown is part of the response, so it
is on in both. Target: ≤ 3% throughput loss.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
from pathlib import Path
from typing import Any

from loadtests.pipeline import ROOT, start_pipeline, workload


def traceparent(sampled: bool) -> dict[str, str]:
    return {"traceparent": f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-{'01' if sampled else '00'}"}


def bootstrap_ci(xs: list[float], seed: int = 7, rounds: int = 4000) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean."""
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(xs, k=len(xs))) for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    from shared.models.build import build_model

    model_dir = build_model("sy-tiny", ROOT / "var" / "models", progress=False)
    n, concurrency, rounds = (16, 4, 2) if quick else (32, 8, 10)
    var_dir = (out / "profile-overhead-var").resolve()
    var_dir.mkdir(parents=True, exist_ok=True)
    proc, url = start_pipeline(model_dir, var_dir, SY_TRACE_SAMPLE_RATIO="1.0")
    sides: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    try:
        await workload(url, "sk-switchyard-local", concurrency, n)  # warm-up block, not counted
        for i in range(rounds):
            for side in ("on", "off") if i % 2 == 0 else ("off", "on"):
                sides[side].append(
                    await workload(
                        url,
                        "sk-switchyard-local",
                        concurrency,
                        n,
                        headers=lambda s=side: traceparent(s == "on"),
                        warm_up=False,
                    )
                )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    spans = var_dir / "run" / "spans.jsonl"
    span_count = sum(1 for _ in spans.open()) if spans.exists() else 0

    losses = [
        1 - on["tokens_per_s"] / off["tokens_per_s"]
        for on, off in zip(sides["on"], sides["off"], strict=True)
    ]
    lo, hi = bootstrap_ci(losses)

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in sides[side])

    mean_loss = statistics.fmean(losses)
    summary = {
        "tokens_per_s_median": {
            "tracing_on": med("on", "tokens_per_s"),
            "tracing_off": med("off", "tokens_per_s"),
        },
        "ttft_p50_ms_median": {
            "tracing_on": med("on", "ttft_p50_ms"),
            "tracing_off": med("off", "ttft_p50_ms"),
        },
        "throughput_loss_per_round": [round(x, 4) for x in losses],
        "throughput_loss_mean": round(mean_loss, 4),
        "throughput_loss_95ci": [round(lo, 4), round(hi, 4)],
        "target_loss_le_3pct": mean_loss <= 0.03,
        "spans_recorded": span_count,
        "workload": {
            "requests_per_block": n,
            "concurrency": concurrency,
            "rounds": rounds,
            "max_tokens": 64,
            "order": "ABBA (on/off, off/on, …) in one stack",
        },
    }
    return {"scenario": "profile-overhead", "runs": sides, "summary": summary}
