"""docs/benchmarks.md is generated from the benchmarks' JSON: every figure comes from a result file."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests.report import render


def test_tables_come_from_the_result_files(tmp_path: Path) -> None:
    (tmp_path / "soak.json").write_text(
        json.dumps(
            {
                "hostile_share": 0.05,
                "memory": {
                    "gateway": {
                        "rss_start_mib": 100.0,
                        "rss_end_mib": 101.0,
                        "slope_mib_per_h": 0.5,
                        "late_slope_mib_per_h": 0.25,
                    }
                },
                "summary": {
                    "duration_s": 1800.0,
                    "rate_rps": 2.0,
                    "requests": 3590,
                    "completed": 3590,
                    "errors": 0,
                    "passed": True,
                    "max_slope_mib_per_h": 64.0,
                    "hostile": {"sent": 205, "dead_lettered_once": 205},
                    "broker_rss": {"mib_per_1000_requests": 12.86},
                },
            }
        )
    )
    (tmp_path / "broker-capacity.json").write_text(
        json.dumps(
            {
                "summary": {"stopped_by": "cap_time", "requests": 4321},
                "rounds": [
                    {
                        "index": 0,
                        "requests": 1053,
                        "broker_rss_mib": 40.5,
                        "probe_p50_ms": 70.1,
                        "probe_p99_ms": 90.0,
                        "errors": 0,
                    }
                ],
            }
        )
    )
    (tmp_path / "bus.json").write_text(json.dumps({"summary": {"p50_ms": 3.25}}))
    page = render(tmp_path)
    assert page.index("## Soak") < page.index("## Embedded broker capacity") < page.index("## bus")
    for figure in (
        "| requests | 3,590 |",
        "| dead lettered once | 205 |",
        "| mib per 1000 requests | 12.86 |",
        "| gateway | 100 | 101 | 0.5 | 0.25 |",
        "| 0 | 1,053 | 40.5 | 70.1 | 90 | 0 |",
        "| p50 ms | 3.25 |",
    ):
        assert figure in page, figure
    assert "No results yet" in render(tmp_path / "none")


def test_each_section_names_the_command_date_and_machine_of_its_run(tmp_path: Path) -> None:
    from loadtests.harness.report import run_info

    run = run_info("python -m loadtests bus --quick")
    assert run["date"][:2] == "20" and "cores" in run["machine"]
    (tmp_path / "bus.json").write_text(json.dumps({"summary": {"p50_ms": 1.5}, "run": run}))
    (tmp_path / "cache.json").write_text(json.dumps({"summary": {"hits": 3}}))  # an older result: no run
    page = render(tmp_path)
    bus, cache = page.split("## bus")[1].split("## cache")
    assert "`python -m loadtests bus --quick`" in bus
    assert f"Run {run['date']} on {run['machine']}." in bus
    assert "`python -m loadtests cache`" in cache and "Run " not in cache
