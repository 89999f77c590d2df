"""Figures and result files: the percentile every scenario reads its latencies with, and the
`<scenario>.json` under var/bench that `python -m loadtests.report` turns into docs/benchmarks.md."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def pct(xs: Sequence[float], q: float) -> float:
    """The q-quantile by rank (no interpolation); NaN for no samples."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def slope(points: Sequence[tuple[float, float]], min_points: int = 2) -> float | None:
    """Least-squares slope of (x, y) points; None with fewer than min_points or no spread in x."""
    n = len(points)
    if n < min_points:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    if var == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / var


def write_result(out: Path, name: str, result: dict[str, Any]) -> Path:
    """`out/<name>.json`, the file the report reads."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(result, indent=2))
    return path


def machine() -> str:
    """The host in a few words: CPU model, cores, memory (the figures depend on it)."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
        memory = f", {mem_kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = ""
    return f"{model}, {os.cpu_count()} cores{memory}, no GPU"


def run_info(command: str) -> dict[str, str]:
    """What the report prints under a section's title: when, where and how the figures were made."""
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "machine": machine(), "command": command}
