"""Engine and stack runs read against each other on a shared host whose speed drifts.

This host's speed drifts by a third within minutes: a ratio read across minutes measures the drift
as much as the stack. So the engine and the stack take turns and each stack round is read against
the engine run beside it; and of several runs of one workload the fastest (the least disturbed)
counts, every run kept beside it in the JSON.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def paired(engine: Sequence[float], ours: Sequence[float]) -> dict[str, Any]:
    """Each stack round in `ours` against the faster engine run beside it (engine[i] ran just
    before ours[i], engine[i + 1] just after), and the median round."""
    rounds = []
    for i, s in enumerate(ours):
        j = i if engine[i] >= engine[i + 1] else i + 1
        rounds.append({"stack": s, "engine": engine[j], "engine_run": j, "ratio": round(s / engine[j], 3)})
    return {"median_ratio": statistics.median(r["ratio"] for r in rounds), "rounds": rounds}


def fastest(runs: Sequence[dict[str, Any]], metric: str, each_key: str) -> dict[str, Any]:
    """The fastest of several runs of one workload, with every run's `metric` under `each_key`."""
    top = max(runs, key=lambda r: r[metric])
    return {**top, each_key: [r[metric] for r in runs]}
