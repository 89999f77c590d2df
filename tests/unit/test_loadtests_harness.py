"""The benchmark harness (loadtests/harness) with stand-ins for the stack and the engine: the
scenarios are only run for real by `make bench`, so their shared pieces are checked here."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtests.harness import stack as harness_stack
from loadtests.harness.client import breakdown_p50, level_summary
from loadtests.harness.engine import parse_result
from loadtests.harness.pairing import fastest, paired
from loadtests.harness.report import pct, slope, write_result
from loadtests.report import render


def test_pct_reads_by_rank_and_is_nan_for_no_samples() -> None:
    assert pct([3.0, 1.0, 2.0, 4.0], 0.5) == 3.0 and pct([1.0, 2.0], 0.99) == 2.0
    assert pct([], 0.5) != pct([], 0.5)  # NaN


def test_slope_is_least_squares_and_none_without_spread() -> None:
    assert slope([(0, 1.0), (1, 3.0), (2, 5.0)]) == 2.0
    assert slope([(1, 1.0), (1, 2.0)]) is None
    assert slope([(0, 1.0), (1, 2.0)], min_points=3) is None


def test_a_written_result_is_what_the_report_reads(tmp_path: Path) -> None:
    path = write_result(tmp_path / "bench", "pipeline-vs-engine", {"summary": {"ratio": 0.912}})
    assert json.loads(path.read_text()) == {"summary": {"ratio": 0.912}}
    page = render(tmp_path / "bench")
    assert "## pipeline-vs-engine" in page and "| ratio | 0.912 |" in page


def test_a_list_summary_renders_one_column_per_row(tmp_path: Path) -> None:
    """pipeline-vs-engine's summary is a list of rows, one per concurrency: a column each, nested
    measures flattened, so the page shows every figure (an empty table before)."""
    rows = [
        {"concurrency": 1, "ratio": 0.9, "hop_p50_ms": {"hop:sy.routing": 2.5}},
        {"concurrency": 8, "ratio": 0.8, "hop_p50_ms": {"hop:sy.routing": 6.7}},
    ]
    write_result(tmp_path, "pipeline-vs-engine", {"summary": rows})
    page = render(tmp_path)
    assert "| measure | concurrency 1 | concurrency 8 |" in page
    assert "| ratio | 0.9 | 0.8 |" in page and "| hop p50 ms / hop:sy.routing | 2.5 | 6.7 |" in page


def test_a_ready_markdown_table_is_printed_as_a_table(tmp_path: Path) -> None:
    table = "| scenario | result |\n|---|---|\n| crash | pass |"
    write_result(tmp_path, "reliability", {"summary": {"all_passed": True, "table": table}})
    page = render(tmp_path)
    assert "\n| crash | pass |" in page and "| table |" not in page


def test_the_engine_result_line_is_found_among_the_engines_logs() -> None:
    out = 'INFO loading\nRESULT {"a": [1, 2]}\nINFO shutdown\n'
    assert parse_result(out) == {"a": [1, 2]}
    assert parse_result("no result here\n") is None


def test_pairing_reads_each_round_against_the_faster_engine_run_beside_it() -> None:
    got = paired([100.0, 80.0, 120.0], [90.0, 60.0])
    assert [r["engine_run"] for r in got["rounds"]] == [0, 2]
    assert got["median_ratio"] == pytest.approx((0.9 + 0.5) / 2)
    top = fastest([{"x": 1.0, "k": "a"}, {"x": 3.0, "k": "b"}], "x", "xs")
    assert top == {"x": 3.0, "k": "b", "xs": [1.0, 3.0]}


def test_a_level_summary_and_the_breakdown_p50() -> None:
    row = level_summary(8, 4, 2.0, 256, [10.0, 20.0, 30.0, 40.0])
    assert row["tokens_per_s"] == 128.0 and row["ttft_p50_ms"] == 30.0 and row["ttft_p99_ms"] == 40.0
    results: list[dict[str, Any]] = [
        {"switchyard": {"breakdown": [{"stage": "queue", "topic": "sy.requests", "duration_ms": 2}]}},
        {"switchyard": {"breakdown": [{"stage": "queue", "topic": "sy.requests", "duration_ms": 4}]}},
        {"switchyard": {"breakdown": [{"stage": "route", "duration_ms": 1, "parent": "x"}]}},
        {"switchyard": None},
    ]
    assert breakdown_p50(results) == {"hop:sy.requests": 3.0}


def test_pipeline_starts_one_stack_with_the_scenarios_settings_and_always_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[dict[str, Any]] = []
    stopped: list[float] = []
    endpoints = {"services": {"gateway": {"url": "http://gw"}, "cache": {"exits": {"1": 1}}}}

    def start(model_dir: Path, var_dir: Path, **kw: Any) -> tuple[str, dict[str, Any]]:
        started.append(kw)
        (var_dir / "run").mkdir(parents=True, exist_ok=True)
        (var_dir / "run" / "endpoints.json").write_text(json.dumps(endpoints))
        return "proc", endpoints

    monkeypatch.setattr(harness_stack, "start_stack", start)
    monkeypatch.setattr(harness_stack, "stop_stack", lambda proc, timeout_s=90: stopped.append(timeout_s))
    with harness_stack.pipeline(tmp_path / "m", tmp_path, stop_timeout_s=7, SY_X="1") as stack:
        assert stack.url == "http://gw/v1"
        assert stack.reread() == endpoints and stack.restarts() == {"cache": {"1": 1}}
    assert started[0]["SY_CACHE_ENABLED"] == "false" and started[0]["SY_X"] == "1"
    assert json.loads(started[0]["SY_POOLS"]) == harness_stack.SINGLE_POOL
    with (
        pytest.raises(RuntimeError),
        harness_stack.pipeline(tmp_path / "m", tmp_path, cache=True, single_pool=False),
    ):
        raise RuntimeError("the workload failed")
    assert started[1]["SY_CACHE_ENABLED"] == "true" and "SY_POOLS" not in started[1]
    assert stopped == [7, 120]


def test_every_scenario_runs_with_the_same_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m loadtests <scenario>` with stand-ins for the scenarios: each takes (out, quick)
    and its JSON lands where the report reads it."""
    import loadtests.__main__ as cli

    for name, fn in cli.SCENARIOS.items():
        assert inspect.iscoroutinefunction(fn), name
        assert list(inspect.signature(fn).parameters)[:2] == ["out", "quick"], name
    calls: list[tuple[str, dict[str, Any]]] = []

    def stand_in(name: str) -> Any:
        async def run(out: Path, quick: bool = False, **extra: Any) -> dict[str, Any]:
            calls.append((name, {"quick": quick, **extra}))
            return {"scenario": name, "summary": {"ran": True, "duration_s": extra.get("duration_s", 0.0)}}

        return run

    monkeypatch.setattr(cli, "SCENARIOS", {n: stand_in(n) for n in cli.SCENARIOS})
    argv = ["loadtests", "batch", "soak", "bus", "--quick", "--out", str(tmp_path), "--batch-lines", "5"]
    monkeypatch.setattr(sys, "argv", [*argv, "--soak-minutes", "2"])
    cli.main()
    assert calls == [
        ("batch", {"quick": True, "lines": 5}),
        ("soak", {"quick": True, "duration_s": 120.0}),
        ("bus", {"quick": True}),
    ]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["batch.json", "bus.json", "soak.json"]
    assert "| ran | yes |" in render(tmp_path)


def test_the_cli_refuses_an_unknown_scenario() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "loadtests", "no-such-scenario"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "unknown scenarios" in proc.stderr
