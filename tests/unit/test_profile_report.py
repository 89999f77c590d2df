"""The profile report: analysis of a recorded run (stages, dominant stage, refinements) and every plot."""

from __future__ import annotations

from pathlib import Path

from shared.devstack.profiling import report
from shared.devstack.profiling.runner import parse_metrics
from shared.devstack.profiling.scenarios import SCENARIOS, Scenario


def request(
    t: float, worker_ms: float, hop_ms: float, pool: str = "vllm", adapter_load: bool = False
) -> dict:
    rows = [
        {"stage": "gateway_accept", "duration_ms": 0.5},
        {"stage": "queue", "topic": "sy.requests", "duration_ms": hop_ms},
        {"stage": "preprocess", "duration_ms": 0.2},
        {"stage": "queue", "topic": "sy.infer.vllm", "duration_ms": 3.0},
        {"stage": "vllm_worker", "duration_ms": worker_ms},
        {"stage": "ttft", "parent": "vllm_worker", "duration_ms": 10.0},
        {"stage": "decode", "parent": "vllm_worker", "duration_ms": worker_ms - 10, "itl_ms": "2,3,4"},
    ]
    if adapter_load:
        rows.append({"stage": "adapter_load", "parent": "vllm_worker", "duration_ms": 40.0})
    total = sum(r["duration_ms"] for r in rows if "parent" not in r)
    return {
        "start": t,
        "end": t + total / 1000,
        "status": 200,
        "ttft_ms": 15.0,
        "chunk_gaps_ms": [5.0],
        "tokens": 8,
        "e2e_ms": total + 1.0,
        "switchyard": {"breakdown": rows, "pool": pool, "e2e_ms": total + 1.0, "stages_total_ms": total},
    }


def recorded_run() -> dict:
    reqs = [request(100 + i * 0.1, 50.0, 2.0) for i in range(99)]
    reqs.append(request(110, 20.0, 900.0, adapter_load=True))  # one slow request stuck in a hop
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
    samples = [
        {"t": 100 + i, "service": "preprocess", "series": {"sy_consumer_lag{stage=preprocess}": float(i % 3)}}
        for i in range(12)
    ] + [
        {"t": 100 + i, "service": "vllm_worker", "series": {"vllm:num_preemptions_total{}": float(i // 4)}}
        for i in range(12)
    ]
    return {
        "scenario": SCENARIOS["smoke"].model_dump(),
        "started": 100.0,
        "finished": 112.0,
        "requests": reqs,
        "samples": samples,
        "service_exits": {"vllm_worker": {"SIGKILL": 1}, "router": {}},
    }


def test_analysis_names_the_dominant_stage_and_keeps_refinements_apart() -> None:
    a = report.analyse(recorded_run())
    assert (a["requests"], a["completed"], a["failed"]) == (101, 100, 1)
    assert list(a["stages"]) == [
        "gateway_accept",
        "hop:sy.requests",
        "preprocess",
        "hop:sy.infer.vllm",
        "vllm_worker",
    ]
    assert a["dominant_stage"] == {"p50": "vllm_worker", "p99": "hop:sy.requests"}
    assert a["stages"]["vllm_worker"]["p50_ms"] == 50.0
    assert set(a["refinements"]) == {"ttft", "decode", "adapter_load"}  # never added to their parent
    assert a["itl_ms"]["n"] == 300 and a["itl_ms"]["p50"] == 3.0
    assert a["adapter_loads"] == 1 and a["pools"] == {"vllm": 100}
    assert a["breakdown_coverage_ms"]["gap_max"] == 1.0
    assert a["preemptions"] == 2.0 and a["oom_kills_suspected"] == 1
    assert a["service_exits"] == {"vllm_worker": {"SIGKILL": 1}}


def test_report_builds_with_every_plot(tmp_path: Path) -> None:
    path, a = report.write(recorded_run(), tmp_path)
    page = path.read_text()
    for name in report.PLOTS:
        assert f'id="plot-{name}"' in page and f'alt="{name}" src="data:image/png;base64,' in page
    assert "Where the time goes: <b>vllm_worker</b> at p50" in page
    assert (tmp_path / "analysis.json").is_file()


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
    # The report links the trace and shows the table.
    table = tmp_path / "w_rank0.profiler_out.txt"  # vLLM writes its operator table beside the trace
    table.write_text("Name  Self CPU %\n")
    answer = {"files": [str(path), str(table)], "seconds": 2.0}
    out = tmp_path / "out"
    run = recorded_run()
    run["engine_trace"] = engine_trace.collect(answer, out)
    page, a = report.write(run, out)
    html = page.read_text()
    assert 'id="engine-trace"' in html and f'href="engine-trace/{path.name}"' in html
    assert (out / "engine-trace" / path.name).is_file() and a["engine_trace"]["top"]
    assert a["engine_trace"]["files"] == [path.name] and f'href="engine-trace/{table.name}"' in html
