"""The cost, capacity and stability scenarios' own logic on stand-in measurements: the capacity
ramp's verdicts, the cost targets, the broker byte count and the report tables."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from loadtests import capacity, cost
from loadtests.harness.broker import record_bytes
from loadtests.report import cost_section, request_capacity_section, stability_section


def _step(rate: float, sustainable: float, p99: float = 20.0) -> dict[str, Any]:
    """What an open-loop step against a server that keeps up to `sustainable` req/s reports."""
    over = rate > sustainable
    return {
        "offered_rps": round(rate, 1),
        "requests": int(rate * 2),
        "failed": 0,
        "refused": 0,
        "lost": 0,
        "answered_rps": round(min(rate, sustainable), 1),
        "p50_ms": 10.0,
        "p99_ms": p99 * (10 if over else 1),
    }


def _ramp(
    monkeypatch: pytest.MonkeyPatch, sustainable: float, blips: set[int] = frozenset()
) -> dict[str, Any]:
    calls: list[float] = []

    async def fake_open_loop(
        client: Any, rate: float, seconds: float, body: Any, start: int = 0
    ) -> dict[str, Any]:
        calls.append(rate)
        step = _step(rate, sustainable)
        if len(calls) in blips:  # one noisy step: p99 way up though the server keeps up
            step["p99_ms"] *= 10
        return step

    async def fake_timed(client: Any, body: Any, path: str) -> tuple[float, float, int]:
        return 0.0, 0.01, 200

    monkeypatch.setattr(capacity, "open_loop", fake_open_loop)
    monkeypatch.setattr(capacity, "_timed", fake_timed)
    return asyncio.run(capacity.ramp("http://127.0.0.1:1", "k", lambda i: {}, 0.1))


def test_the_ramp_finds_the_rate_before_p99_doubles_and_narrows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _ramp(monkeypatch, sustainable=50)
    assert 45 <= out["capacity_rps"] <= 50  # 45.3 held, 64 did not; the halvings land in between
    assert any(s.get("refine") and s["held"] for s in out["steps"])  # narrowed past the √2 step
    assert out["lost"] == 0 and out["unloaded_p99_ms"] == 20.0


def test_one_noisy_step_is_run_again_before_the_ramp_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _ramp(monkeypatch, sustainable=50, blips={5})
    assert any(s.get("retry_of") for s in out["steps"])
    assert out["capacity_rps"] >= 45  # the blip at step 5 did not end the ramp


def test_cost_targets_read_the_right_rows() -> None:
    def row(c: int, stream: bool, cpu: dict[str, float], ttft: float | None = 10.0) -> dict[str, Any]:
        return {
            "concurrency": c,
            "stream": stream,
            "ttft_p50_ms": ttft if stream else None,
            "cpu_ms_per_request": cpu,
            "off_engine_cpu_ms_per_request": sum(v for k, v in cpu.items() if k != cost.ENGINE),
        }

    anchor = [row(c, s, {"api_server": 5.0, "engine": 90.0}, 12.0) for c in (1, 8) for s in (True, False)]
    off = [
        row(c, s, {"gateway": 8.0, "broker": 10.0, "engine": 50.0}, 20.0)
        for c in (1, 8)
        for s in (True, False)
    ]
    on = [
        row(c, s, {"gateway": 8.0, "broker": 10.0, "cache": 4.0, "milvus": 1.0})
        for c in (1, 8)
        for s in (True, False)
    ]
    s = cost.summarise(anchor, off, on)
    assert s["off_engine_vs_anchor"] == 3.6 and s["off_engine_vs_anchor_pass"]
    assert s["cache_and_milvus_cpu_ms_per_miss"] == 5.0 and s["cache_pass"]
    assert s["added_ttft_p50_ms_c1"] == 8.0 and s["added_ttft_pass"]
    off[2]["off_engine_cpu_ms_per_request"] = 21.0  # c8 streamed: 4.2x the anchor
    assert not cost.summarise(anchor, off, on)["off_engine_vs_anchor_pass"]
    slow = [{**r, "requests_per_s": 1.0, "ttft_p50_ms": 8.0 if r["stream"] else None,
             "cpu_ms_per_request": {"api_server": 10.0}} for r in anchor]  # fmt: skip
    fast = [{**r, "requests_per_s": 9.0} for r in anchor]
    both = cost.summarise_runs([slow, fast], off, on)
    assert both["anchor_api_server_cpu_ms_per_request"] == 5.0  # the faster run's CPU
    assert both["added_ttft_p50_ms_c1"] == 12.0  # the lowest TTFT of any run: 20 - 8
    assert both["off_engine_vs_each_anchor_run"] == [2.1, 4.2]


def test_engine_processes_are_told_apart_by_their_title() -> None:
    class P:
        def __init__(self, name: str) -> None:
            self._name = name

        def name(self) -> str:
            return self._name

        def cmdline(self) -> list[str]:
            return ["python"]

    assert cost._is_engine(P("VLLM::EngineCore")) and cost._is_engine(P("VLLM::Worker"))
    assert not cost._is_engine(P("python3"))
    assert cost.per_request_ms({"a": 1.0}, {"a": 1.5, "b": 0.2}, 100) == {"a": 5.0, "b": 2.0}


def test_broker_bytes_count_key_value_and_headers() -> None:
    rec = SimpleNamespace(key=b"rid", value=b"x" * 10, headers=[("sy-kind", b"chat"), ("empty", None)])
    assert record_bytes(rec) == 3 + 10 + len("sy-kind") + 4 + len("empty")


def test_the_report_renders_the_three_scenarios() -> None:
    run = {"command": "python -m loadtests x", "date": "d", "machine": "m"}
    cpu_row = {
        "concurrency": 8,
        "stream": True,
        "requests_per_s": 10.0,
        "ttft_p50_ms": 30.0,
        "off_engine_cpu_ms_per_request": 20.0,
        "engine_cpu_ms_per_request": 50.0,
        "cpu_ms_per_request": {"gateway": 12.0, "broker": 8.0, "engine": 50.0},
        "hops_ms": {"hop:sy.routing": {"p50": 4.0, "p99": 9.0}},
    }
    text = "\n".join(
        cost_section(
            {
                "workload": {"max_tokens": 64},
                "vllm_openai_server": [{**cpu_row, "cpu_ms_per_request": {"api_server": 5.0}}],
                "switchyard_cache_off": [cpu_row],
                "switchyard_cache_on": [cpu_row],
                "summary": {"off_engine_vs_anchor": 4.0},
                "run": run,
            }
        )
    )
    assert "| gateway |" not in text and "|   gateway |" in text and "4.0 / 9.0" in text
    cap = {"capacity_rps": 40.0, "steps": [{"offered_rps": 4.0, "held": True}]}
    text = "\n".join(
        request_capacity_section(
            {"workload": {"p99_factor": 2.0}, "switchyard_cache_off": cap, "summary": {"lost": 0}, "run": run}
        )
    )
    assert "switchyard cache off: capacity 40.0 req/s" in text
    window = {"answered_total": 1000, "p50_ms": 10.0, "off_engine_cpu_ms_per_request": 7.5}
    text = "\n".join(
        stability_section({"windows": [window], "summary": {"cpu_last_vs_first": 1.1}, "run": run})
    )
    assert "cpu last vs first" in text and "answered total 1,000" in text
