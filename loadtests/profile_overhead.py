"""profile-overhead: what tracing costs. The same closed-loop streaming workload through the
whole pipeline twice in one run — tracing on (every trace sampled, spans to the JSONL sink, as
`make run` does) and off (sample ratio 0: no span is recorded or exported) — alternating
on/off/on/off so drift of the machine hits both alike. Target: ≤ 3% throughput loss.
"""

from __future__ import annotations

import signal
import statistics
from pathlib import Path
from typing import Any

from loadtests.pipeline import ROOT, start_pipeline, workload


async def one_side(model_dir: Path, var_dir: Path, tracing: bool, n: int, concurrency: int) -> dict[str, Any]:
    env = {"SY_TRACE_SAMPLE_RATIO": "1.0" if tracing else "0.0"}
    proc, url = start_pipeline(model_dir, var_dir, **env)
    try:
        return await workload(url, "sk-switchyard-local", concurrency, n)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    from shared.models.build import build_model

    model_dir = build_model("sy-tiny", ROOT / "var" / "models", progress=False)
    n, concurrency, rounds = (16, 4, 1) if quick else (48, 8, 2)
    sides: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for i in range(rounds):
        for side in ("on", "off"):
            var_dir = (out / f"profile-overhead-var-{side}-{i}").resolve()
            var_dir.mkdir(parents=True, exist_ok=True)
            sides[side].append(await one_side(model_dir, var_dir, side == "on", n, concurrency))

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in sides[side])

    on_tps, off_tps = med("on", "tokens_per_s"), med("off", "tokens_per_s")
    summary = {
        "tokens_per_s": {"tracing_on": on_tps, "tracing_off": off_tps},
        "throughput_loss": round(1 - on_tps / off_tps, 4),
        "ttft_p50_ms": {"tracing_on": med("on", "ttft_p50_ms"), "tracing_off": med("off", "ttft_p50_ms")},
        "target_loss_le_3pct": (1 - on_tps / off_tps) <= 0.03,
        "workload": {"requests": n, "concurrency": concurrency, "rounds": rounds, "max_tokens": 64},
    }
    return {"scenario": "profile-overhead", "runs": sides, "summary": summary}
