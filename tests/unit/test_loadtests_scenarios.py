"""Scenarios run end to end with stand-ins for the stack and the engine (the real runs are
`make bench` only): the orchestration, the pairing and the JSON each writes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from loadtests.report import render


@contextmanager
def fake_pipeline(*_: Any, **__: Any) -> Iterator[Any]:
    yield SimpleNamespace(url="http://gw/v1", proc=None)


def level(concurrency: int, tps: float, ttft: float = 10.0) -> dict[str, Any]:
    return {"concurrency": concurrency, "tokens_per_s": tps, "ttft_p50_ms": ttft, "ttft_p99_ms": 2 * ttft}


def test_pipeline_vs_engine_pairs_each_stack_round_with_the_engine_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import loadtests.pipeline as sc

    # per call, per level (1 and 8): before (mp, uni), a turn, a turn, after (mp, uni)
    engine = iter([1000.0, 900.0, 1100.0, 950.0, 1000.0, 1200.0, 800.0, 1000.0] + [1000.0] * 4)
    executors: list[str] = []

    def direct(
        model_dir: Path, levels: list[tuple[int, int]], executor: str = "auto"
    ) -> list[dict[str, Any]]:
        executors.append(executor)
        return [{**level(c, next(engine)), "executor": executor} for c, _ in levels]

    async def workload(url: str, key: str, c: int, n: int, **_: Any) -> dict[str, Any]:
        bd = {"gateway": 1.0, "hop:sy.requests": 3.0, "vllm_worker": 50.0}
        return {**level(c, 800.0, 30.0), "breakdown_p50_ms": bd}

    async def idle(*_: Any) -> dict[str, Any]:
        return {"ttft_p50_ms": 40.0}

    monkeypatch.setattr(sc, "sy_tiny", lambda: tmp_path / "sy-tiny")
    monkeypatch.setattr(sc, "baseline_executors", lambda: ("mp", "uni"))
    monkeypatch.setattr(sc, "run_direct_engine", direct)
    monkeypatch.setattr(sc, "start_vllm_server", lambda *_: (None, "http://vllm/v1"))
    monkeypatch.setattr(sc, "stop_process", lambda *_, **__: None)
    monkeypatch.setattr(sc, "workload", workload)
    monkeypatch.setattr(sc, "after_idle", idle)
    monkeypatch.setattr(sc, "pipeline", fake_pipeline)
    result = asyncio.run(sc.run(tmp_path, quick=True))
    # before (mp, uni), a turn, the stack, a turn, after (mp, uni); the turns use the faster one
    assert executors == ["mp", "uni", "uni", "uni", "mp", "uni"]
    row1, row8 = result["comparison"]
    assert row1["paired_rounds"][0]["engine_tokens_per_s"] == 1000.0  # the faster turn beside it
    assert row1["tokens_per_s_ratio_vs_asyncllm"] == 0.8
    assert row1["added_ttft_p50_ms_vs_asyncllm"] == 20.0
    assert row1["hop_share_of_overhead"] == {"hop:sy.requests": 0.75}
    assert row8["serving_path_only"]["tokens_per_s_ratio_vs_asyncllm"] == round(800 / 1200, 3)
    assert "core_split_ceiling" not in row1 and "asyncllm_on_switchyards_engine_cores" not in result
    (tmp_path / "pipeline-vs-engine.json").write_text(json.dumps(result))
    assert "## pipeline-vs-engine" in render(tmp_path)


def test_rollouts_pairs_each_stack_round_and_keeps_every_engine_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import loadtests.rollouts as sc

    speeds = iter([50.0, 60.0, 55.0, 58.0, 40.0, 70.0])

    def direct(model_dir: Path, ks: tuple[int, ...], n: int, executor: str = "auto") -> dict[str, Any]:
        sps = next(speeds)
        run = {"samples_per_s": sps, "first_group_ms": 100.0, "executor": executor}
        return {str(k): sc.best([run]) for k in ks}

    async def stack_round(model_dir: Path, var: Path, ks: tuple[int, ...], n: int) -> dict[str, Any]:
        job = {"samples_per_s": 52.2, "group_completion_ms_first": 150.0}
        return {str(k): sc.best([job]) for k in ks}

    async def scoring(samples: int) -> dict[str, Any]:
        return {"stage_samples_per_s": 9000.0, "functions_only_samples_per_s": 20000.0}

    monkeypatch.setattr(sc, "sy_tiny", lambda: tmp_path / "sy-tiny")
    monkeypatch.setattr(sc, "baseline_executors", lambda: ("mp", "uni"))
    monkeypatch.setattr(sc, "run_direct", direct)
    monkeypatch.setattr(sc, "switchyard_round", stack_round)
    monkeypatch.setattr(sc, "scoring_throughput", scoring)
    result = asyncio.run(sc.run(tmp_path, quick=True))
    s = result["summary"]
    assert s["paired_rounds"][0]["engine"] == 58.0 and s["samples_per_s_ratio"] == 0.9
    assert s["direct_samples_per_s"] == 70.0 and s["samples_per_s_ratio_best_vs_fastest"] == round(
        52.2 / 70, 3
    )
    assert len(result["asyncllm_in_process"]["8"]["runs_samples_per_s"]) == 6


def test_multimodal_measures_the_stage_against_a_plain_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tiny inputs and no stack: the stage runs for real, the TTFT part is a stand-in."""
    import loadtests.multimodal as sc

    photo = sc.photo
    monkeypatch.setattr(sc, "RESOLUTIONS", [(64, 48)])
    monkeypatch.setattr(sc, "AUDIO_SECONDS", [1])
    monkeypatch.setattr(sc, "photo", lambda w, h, seed=0: photo(min(w, 64), min(h, 48), seed))
    ttft = {"text": {"ttft_p50_ms": 1.0}, "image_requests": {"ttft_p50_ms": 2.0}}
    monkeypatch.setattr(sc, "ttft_text_vs_image", lambda out, n: ttft)
    result = asyncio.run(sc.run(tmp_path, quick=True))
    assert set(result["summary"]["image_p50_ms"]) == {"JPEG 64x48", "PNG 64x48"}
    assert set(result["summary"]["audio_p50_ms"]) == {
        f"{f} 44.1 kHz stereo 1 s" for f in ("wav", "mp3", "flac")
    }
    row = result["images"][0]
    assert row["stored_bytes"] > 0 and row["ratio_vs_plain_decode"] > 0 and row["preprocess"]["n"] == 3


def test_lora_scaling_reads_its_target_on_one_worker_and_the_engine_floor_beside_it() -> None:
    from loadtests.lora import summarize

    def stack(workers: int, tps: dict[str, float]) -> dict[str, Any]:
        cold = {
            "adapter_load_ms": 30.0,
            "downloaded": True,
            "cold_request_ms": 90.0,
            "warm_request_p50_ms": 20.0,
        }
        per_worker = {"w1": 1, "w2": 1}
        wls = {
            wl: {
                "tokens_per_s": v,
                "ratio_to_run_base": round(v / tps["base"], 3),
                "requests_per_worker": per_worker,
            }
            for wl, v in tps.items()
        }
        return {"workers": workers, "workloads": wls, "cold_load": cold}

    sixteen = {"16-uniform": 850.0, "16-zipf": 790.0}
    runs = {
        "one-worker": stack(1, {"base": 1000.0, **sixteen}),
        "one-worker-lora-off": stack(1, {"base": 1100.0}),
        "affinity-on": stack(2, {"base": 900.0, **sixteen}),
        "affinity-off": stack(2, {"base": 900.0, **sixteen}),
    }
    floor_on = {
        "lora": True,
        "max_loras": 4,
        "base": {"tokens_per_s": 1200.0},
        "zero-adapter": {"tokens_per_s": 1000.0},
    }
    floor_on |= {"16-uniform": {"tokens_per_s": 900.0}, "16-zipf": {"tokens_per_s": 800.0}}
    s = summarize(runs, {"base": {"tokens_per_s": 1250.0}}, floor_on)
    assert s["target"]["uniform"] == 0.85 and s["target"]["zipf"] == 0.79 and not s["target"]["met"]
    assert s["lora_cost_on_base"] == round(1000 / 1100, 3) and s["affinity_comparison_meaningful"]
    assert s["engine_floor_16_adapter_ratios"]["16-uniform"]["vs_base_through_zero_adapter"] == 0.9
    assert s["engine_floor_tokens_per_s"]["lora-off"] == {"base": 1250.0}
    assert s["cold_load"]["affinity-on"]["adapter_load_ms"] == 30.0 and "note" not in s


def test_the_in_process_parts_run_on_small_workloads() -> None:
    """rollouts' reward scoring (the reward stage, no Kafka) and pools' choose_pool timing."""
    from loadtests.pools import choose_pool_overhead
    from loadtests.rollouts import scoring_throughput

    scoring = asyncio.run(scoring_throughput(160))
    assert scoring["samples"] == 160 and scoring["records_out"] > 160 and scoring["stage_samples_per_s"] > 0
    timing = choose_pool_overhead(200)
    assert timing["decisions"] == 200 and timing["workers"] == 64 and timing["p99_us"] >= timing["p50_us"]
