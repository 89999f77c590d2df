"""The profile report: analysis of a recorded run (per-pool stacks, the critical-path headline,
refinements) and every chart, with a reason in place of each chart that has no data."""

from __future__ import annotations

import re
from pathlib import Path

from shared.devstack.profiling import report
from shared.devstack.profiling.analysis import OUTSIDE
from shared.devstack.profiling.runner import parse_metrics
from shared.devstack.profiling.scenarios import SCENARIOS, Scenario
from tests.helpers.profile_runs import lag_samples, request, run_of, two_pools


def recorded_run() -> dict:
    """One pool; one slow request stuck in a hop; one refused request; an adapter load."""
    reqs = [request(100 + i * 0.1, "vllm", 50.0) for i in range(99)]
    reqs.append(request(110, "vllm", 20.0, hop_ms=900.0, adapter="math@2", adapter_load=True))
    reqs.append(
        {
            "start": 111,
            "end": 111.5,
            "status": 429,
            "ttft_ms": None,
            "tokens": 0,
            "e2e_ms": 1.0,
            "error": "rate",
        }
    )
    return run_of(reqs, service_exits={"vllm_worker": {"SIGKILL": 1}, "router": {}})


def figure(page: str, name: str) -> str:
    m = re.search(rf'<figure id="plot-{name}".*?</figure>', page, re.S)
    assert m, name
    return m.group(0)


def test_analysis_keeps_stages_in_order_and_refinements_apart() -> None:
    a = report.analyse(recorded_run())
    assert (a["requests"], a["completed"], a["failed"]) == (101, 100, 1)
    assert list(a["stages"])[:5] == ["gateway_accept", "hop:sy.requests", "cache", "hop:sy.routing", "router"]
    assert a["stages"]["vllm_worker"]["p50_ms"] == 50.0 and a["stages"]["vllm_worker"]["n"] == 100
    assert set(a["refinements"]) == {"ttft", "decode", "adapter_load"}  # never added to their parent
    assert a["itl_ms"]["n"] == 300 and a["itl_ms"]["p50"] == 3.0
    assert a["adapter_loads"] == 1 and list(a["pools"]) == ["vllm"]
    assert a["breakdown_coverage_ms"]["gap_max"] == 0.0
    assert a["preemptions"] == 2.0 and a["oom_kills_suspected"] == 1
    assert a["service_exits"] == {"vllm_worker": {"SIGKILL": 1}}
    # The slowest request's time is mostly the stuck hop.
    assert a["dominant_stage"]["slowest_1pct"] == "hop:sy.requests"


def test_each_pool_is_stacked_apart_and_checked_against_its_own_median() -> None:
    """Stacking stage medians across two pools (the old chart) gave a bar no request ever took."""
    a = report.analyse(two_pools())
    assert set(a["pools"]) == {"vllm", "triton"}
    vllm, triton = a["pools"]["vllm"], a["pools"]["triton"]
    assert "triton_worker" not in vllm["p50_stack_ms"] and "vllm_worker" not in triton["p50_stack_ms"]
    assert list(vllm["p50_stack_ms"])[-1] == OUTSIDE  # the client's time beyond the breakdown, last
    assert vllm["p50_stack_ms"][OUTSIDE] == 1.0 and vllm["stage_p50_ms"]["cache"] == 27.0
    for p in (vllm, triton):
        c = p["check"]
        assert c["within_tolerance"] and abs(c["stack_ms"] - c["e2e_p50_ms"]) <= 0.1 * c["e2e_p50_ms"], c
    assert 70 < vllm["check"]["stack_ms"] < 90 and 100 < triton["check"]["stack_ms"] < 120
    # Each pool's stack stays under the run's slowest pool's median; summed across pools it would not.
    across = sum(s["p50_ms"] for s in a["stages"].values())
    assert across > 1.3 * a["e2e_ms"]["p50"] and max(p["check"]["stack_ms"] for p in (vllm, triton)) < across


def test_the_stack_is_the_median_requests_own_and_is_flagged_when_off_the_median() -> None:
    """Three kinds of request in one pool: a third slow in the worker, a third slow in a hop, a
    third fast. Each stage's median is small and they sum far below the median request; the
    median requests' own breakdown adds up to it."""
    kinds = [(200.0, 2.0), (10.0, 190.0), (10.0, 2.0)]
    reqs = [request(100 + i * 0.01, "vllm", kinds[i % 3][0], hop_ms=kinds[i % 3][1]) for i in range(99)]
    pool = report.analyse(run_of(reqs))["pools"]["vllm"]
    check = pool["check"]
    assert sum(pool["stage_p50_ms"].values()) < 0.5 * check["e2e_p50_ms"]
    assert check["within_tolerance"] and abs(check["diff_pct"]) < 5, check
    assert pool["p50_band"]["n"] == 20 and pool["p50_band"]["e2e_ms"][0] <= check["e2e_p50_ms"]
    # Breakdown rows that claim more time than the client measured (a row counted twice) are flagged.
    for r in reqs:
        r["e2e_ms"] = r["switchyard"]["stages_total_ms"] / 2
    run = run_of(reqs)
    a = report.analyse(run)
    assert (
        not a["pools"]["vllm"]["check"]["within_tolerance"] and a["pools"]["vllm"]["check"]["diff_pct"] > 10
    )
    assert "stack off its measured median by more than 10% in: vllm" in figure(
        report.render(run, a), "stages"
    )


def test_headline_comes_from_the_critical_paths_of_the_requests_sent() -> None:
    """Triton is the largest stage median but serves a third of the requests; the 27 ms cache
    hold is on every request's path: over the requests sent, the cache holds the most time."""
    run = two_pools()
    a = report.analyse(run)
    assert max(a["stages"], key=lambda k: a["stages"][k]["p50_ms"]) == "triton_worker"  # the old headline
    head = a["headline"]
    assert a["dominant_stage"]["overall"] == "cache" == head["top"]["stage"]
    rows = {r["stage"]: r for r in head["critical_path"]}
    n = head["requests_counted"]
    triton_n = sum(1 for r in run["requests"] if r["switchyard"]["pool"] == "triton")
    assert rows["triton_worker"]["share_of_requests"] == round(triton_n / n, 4)
    total = sum(
        r["switchyard"]["breakdown"][6]["duration_ms"]
        for r in run["requests"]
        if r["switchyard"]["pool"] == "triton"
    )
    assert (
        abs(rows["triton_worker"]["ms_per_request"] - total / n) < 0.01
    )  # summed per request, over all sent
    assert rows["cache"]["ms_per_request"] == 27.0 and rows["cache"]["share_of_requests"] == 1.0
    assert rows[OUTSIDE]["ms_per_request"] == 1.0  # the client's time past the breakdown is on the path
    assert abs(sum(r["share_of_time"] for r in head["critical_path"]) - 1) < 0.01
    page = report.render(run, a)
    assert "<b>cache</b>,\n27.0 ms per request sent" in page.replace("\r", "")


def test_report_builds_with_every_chart_and_shows_the_client_and_scenario(tmp_path: Path) -> None:
    run = two_pools()
    run["requests"][5] = request(100.25, "vllm", 40.0, adapter="math@2", adapter_load=True)
    run["requests"][7] = request(100.35, "vllm", 0.0, hit=True)
    run["scenario"] = {**run["scenario"], "duration_s": 6.0}
    run["overrides"] = {"duration_s": "--duration"}
    path, a = report.write(run, tmp_path)
    page = path.read_text()
    for name in report.PLOTS:
        assert f'alt="{name}" src="data:image/png;base64,' in figure(page, name), name
    assert "No data" not in page
    assert "Sent as tenant <b>acme</b> with API key <code>sk-acm… (12 chars)</code> (--tenant)" in page
    assert "<tr><td>duration</td><td>6 s</td><td>8 s</td><td>--duration</td></tr>" in page
    assert (
        "<tr><td>load</td><td>closed loop, 2 in flight</td><td>closed loop, 2 in flight</td><td></td></tr>"
        in page
    )
    assert "cache hit" in a["pools"] and (tmp_path / "analysis.json").is_file()


def test_a_chart_without_data_says_why(tmp_path: Path) -> None:
    """Base-model traffic only, no repeated prompt, no stack metrics: those charts explain."""
    run = two_pools(40)
    run["samples"] = []
    run["metrics"] = {"why_none": "no running stack's endpoints file was found (/x/var/run/endpoints.json)"}
    page = report.render(run, report.analyse(run))
    lag = figure(page, "lag")
    assert (
        'class="nodata"' in lag and "No data: no running stack&#x27;s endpoints file was found (/x/var" in lag
    )
    assert "No data: every request went to the base model sy-tiny" in figure(page, "adapters")
    assert "0 hits: the scenario repeats no prompt (cache_hit_ratio 0" in figure(page, "cache")
    # Every /metrics read failed: the first error is named.
    run["samples"] = [{"t": 101, "service": "router", "error": "ConnectError('refused')"}]
    assert "every /metrics read failed, e.g. router: ConnectError" in figure(
        report.render(run, report.analyse(run)), "lag"
    )
    # Nothing completed: every chart says so, with the errors.
    failed = run_of(
        [
            {
                "start": 100,
                "end": 100.1,
                "status": 401,
                "ttft_ms": None,
                "tokens": 0,
                "e2e_ms": 3.0,
                "error": "invalid key",
            }
        ],
        samples=lag_samples(),
    )
    page = report.render(failed, report.analyse(failed))
    for name in ("stages", "ttft", "itl", "throughput", "cache", "adapters", "pools"):
        assert "No data: no request completed: 1 sent, all failed (invalid key)" in figure(page, name), name
    assert "No data" not in figure(page, "lag")  # the services' metrics were there
    # An unstreamed scenario has no client TTFT.
    flat = two_pools(20)
    flat["scenario"] = {**flat["scenario"], "stream": False}
    assert "No data: the scenario does not stream" in figure(
        report.render(flat, report.analyse(flat)), "ttft"
    )


def test_metrics_text_is_parsed_with_the_prometheus_parser() -> None:
    text = (
        "# TYPE sy_consumer_lag gauge\n"
        'sy_consumer_lag{stage="cache",topic="sy.prepared",partition="0"} 3\n'
        'sy_consumer_lag{stage="cache",topic="sy.prepared",partition="1"} 4\n'
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1e6\n"
        "# TYPE other gauge\nother 1\n"
    )
    assert parse_metrics(text) == {
        "sy_consumer_lag{stage=cache}": 7.0,
        "process_resident_memory_bytes{}": 1e6,
    }


def test_scenarios_validate() -> None:
    import pytest
    from pydantic import ValidationError

    assert {"smoke", "interactive", "saturate", "long-prompts", "cache-heavy"} <= set(SCENARIOS)
    with pytest.raises(ValidationError):
        Scenario(name="x", max_tokens=(10, 5))
    with pytest.raises(ValidationError):
        Scenario(name="x", adapter_mix={})


def test_engine_trace_summary_ranks_self_time_and_counts_syncs(tmp_path: Path) -> None:
    """A torch-profiler Chrome trace as a GPU run writes it: nested CPU ops, kernels, a sync."""
    import gzip
    import json

    from shared.devstack.profiling import engine_trace

    ev = [
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "ts": 0,
            "dur": 10_000,
            "pid": 1,
            "tid": 1,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "execute_model",
            "ts": 0,
            "dur": 9_000,
            "pid": 1,
            "tid": 1,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 100, "dur": 3_000, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 200, "dur": 2_500, "pid": 1, "tid": 1},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaStreamSynchronize",
            "ts": 4_000,
            "dur": 1_500,
            "pid": 1,
            "tid": 1,
        },
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "ts": 300, "dur": 2_000, "pid": 0, "tid": 7},
        {"ph": "i", "cat": "cpu_op", "name": "instant", "ts": 5, "pid": 1, "tid": 1},
    ]
    path = tmp_path / "w_rank0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}).encode()))
    s = engine_trace.summarise([path])
    top = {t["name"]: t for t in s["top"]}
    assert top["aten::linear"]["self_ms"] == 0.5 and top["aten::linear"]["total_ms"] == 3.0  # less addmm
    assert top["aten::addmm"]["self_ms"] == 2.5 and top["sm90_gemm"]["self_ms"] == 2.0
    assert s["top"][0]["name"] == "aten::addmm" and "execute_model" not in top  # annotations: no self time
    assert s["cpu_gpu_sync"] == {"calls": 1, "ms": 1.5} and s["gpu"] is True
    assert "Trace" not in s["by_category_ms"] and s["by_category_ms"]["user_annotation"] == 9.0
    # The report links the trace and shows the table. The worker names its files relative to its
    # own directory, which need not be the profiler's.
    table = tmp_path / "w_rank0.profiler_out.txt"  # vLLM writes its operator table beside the trace
    table.write_text("Name  Self CPU %\n")
    answer = {"files": [path.name, table.name, "gone.json"], "seconds": 2.0}
    out = tmp_path / "out"
    run = recorded_run()
    run["engine_trace"] = engine_trace.collect(answer, out, base=tmp_path)
    page, a = report.write(run, out)
    html = page.read_text()
    assert 'id="engine-trace"' in html and f'href="engine-trace/{path.name}"' in html
    assert (out / "engine-trace" / path.name).is_file() and a["engine_trace"]["top"]
    assert a["engine_trace"]["files"] == [path.name] and f'href="engine-trace/{table.name}"' in html
    assert a["engine_trace"]["missing"] == [str(tmp_path / "gone.json")] and "not found here" in html


def test_per_second_charts_leave_out_a_last_part_second() -> None:
    """A run that ends 0.2 s into its fifth second: that second's few requests would read as a
    collapse of throughput."""
    from shared.devstack.profiling.plots import _per_second

    run = run_of([request(t, "vllm", 20.0) for t in (100.5, 103.5, 104.1)])
    run["finished"] = 104.2
    assert sorted(_per_second(run, run["requests"], lambda r: 1)) == [0, 3]
    run["finished"] = 104.6  # more than half of it: kept
    assert sorted(_per_second(run, run["requests"], lambda r: 1)) == [0, 3, 4]


def test_the_slowest_bar_is_marked_at_those_requests_own_e2e() -> None:
    """300 requests: the slowest 1% are three (stuck 300, 600 and 900 ms in a hop). Their bar is
    marked at their own mean e2e, which their stack adds up to; the p99 is another figure (here
    the fastest of the three), and a bar drawn against it looked 300 ms too long."""
    reqs = [request(100 + i * 0.05, "vllm", 50.0) for i in range(297)]
    reqs += [request(120 + i, "vllm", 20.0, hop_ms=h) for i, h in enumerate((300.0, 600.0, 900.0))]
    p = report.analyse(run_of(reqs))["pools"]["vllm"]
    assert p["slowest_1pct_n"] == 3
    slow = sum(p["slowest_1pct_mean_ms"].values())
    assert abs(p["slowest_1pct_e2e_ms"] - slow) <= 0.01 * slow, (p["slowest_1pct_e2e_ms"], slow)
    assert p["e2e_ms"]["p99"] < 0.6 * slow


def test_a_repeat_sends_an_answered_request_again_exactly() -> None:
    """cache_hit_ratio repeats whole requests (model or adapter, max_tokens, media), not only the
    prompt: a repeat with another adapter or max_tokens is a different cache key and cannot hit."""
    from shared.devstack.profiling.runner import Generator

    sc = Scenario(
        name="t",
        cache_hit_ratio=0.5,
        adapter_mix={"": 0.5, "tally": 0.5},
        max_tokens=(8, 64),
        media_share=0.3,
    )
    gen = Generator(sc)
    sent: list[dict] = []
    repeats = 0
    for _ in range(400):
        body, meta = gen.next()
        if meta["repeat"]:
            repeats += 1
            assert body in sent, body
        else:
            gen.answered(body, meta)
        sent.append(body)
    assert 150 < repeats < 250, repeats
