"""The benchmark starters build the environment each scenario's configurations ask for (a
scenario that cannot start its stack is only found when someone runs `make bench`)."""

from __future__ import annotations

from pathlib import Path

from loadtests.harness.stack import stack_env
from loadtests.lora_stack import Stack


def test_stack_env_takes_the_callers_settings_over_its_defaults(tmp_path: Path) -> None:
    env = stack_env(tmp_path / "models" / "sy-tiny", tmp_path, SY_VLLM_ENABLE_LORA="true")
    assert env["SY_VLLM_ENABLE_LORA"] == "true" and env["SY_VAR_DIR"] == str(tmp_path)
    assert stack_env(tmp_path / "m", tmp_path)["SY_VLLM_ENABLE_LORA"] == "false"


def test_every_lora_scaling_configuration_builds_its_stack_environment(tmp_path: Path) -> None:
    for extra, lora in (
        ({"SY_ROUTER_ADAPTER_AFFINITY": "true"}, "true"),
        ({"SY_VLLM_ENABLE_LORA": "false", "SY_ROUTER_ADAPTER_AFFINITY": "false"}, "false"),
    ):
        stack = Stack(tmp_path, tmp_path / "models" / "sy-tiny", 2, **extra)
        assert stack.env["SY_VLLM_ENABLE_LORA"] == lora
        assert stack.env["SY_ROUTER_ADAPTER_AFFINITY"] == extra["SY_ROUTER_ADAPTER_AFFINITY"]


def test_the_rollouts_baseline_is_the_engines_best_run_over_both_cpu_executors() -> None:
    """The ratio is read against the faster engine layout, and the JSON keeps every run of both."""
    from loadtests.rollouts import merge

    mp = {"samples_per_s": 60.7, "runs_samples_per_s": [60.7, 59.9], "executor": "mp"}
    uni = {"samples_per_s": 83.4, "runs_samples_per_s": [63.2, 83.4], "executor": "uni"}
    before = merge([mp, uni])
    after = merge(
        [{**mp, "samples_per_s": 61.0, "runs_samples_per_s": [61.0]}, {**uni, "samples_per_s": 70.2}]
    )
    both = merge([before, after])
    assert both["samples_per_s"] == 83.4 and both["executor"] == "uni"
    assert both["best_by_executor"] == {"mp": 61.0, "uni": 83.4}
    assert len(both["runs_samples_per_s"]) == 7


def test_loadtests_stack_env_reaches_every_stack_and_the_shells_settings_do_not(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("SY_KAFKA_IDLE_AFTER_S", "9")  # a stray export: not passed on
    monkeypatch.setenv("LOADTESTS_STACK_ENV", "SY_KAFKA_IDLE_AFTER_S=0 SY_STREAM_FLUSH_MS=5 NOT_OURS=1 junk")
    env = stack_env(tmp_path / "m", tmp_path)
    assert env["SY_KAFKA_IDLE_AFTER_S"] == "0" and env["SY_STREAM_FLUSH_MS"] == "5"
    assert "NOT_OURS" not in env  # only settings go through


def test_the_pipeline_baseline_is_the_engines_fastest_run_of_each_level() -> None:
    """Runs before, between and after the stacks: the fastest counts, so a baseline caught in a
    slow minute cannot flatter the pipeline; every run stays in the JSON."""
    from loadtests.pipeline import level_fastest

    before = {"concurrency": 8, "tokens_per_s": 1550.2, "executor": "mp"}
    after = {"concurrency": 8, "tokens_per_s": 2001.0, "executor": "mp"}
    between = {"concurrency": 8, "tokens_per_s": 2293.6, "executor": "uni"}
    best = level_fastest([before, after, between])
    assert best["tokens_per_s"] == 2293.6 and best["executor"] == "uni"
    assert best["tokens_per_s_of_each_run"] == [1550.2, 2001.0, 2293.6]


def test_each_pipeline_round_is_read_against_the_engine_runs_beside_it() -> None:
    """Engine and stack take turns; a round counts against the faster of its two neighbours, and
    the median round is the target figure, so one slow or fast minute moves it little."""
    from loadtests.pipeline import paired_rounds

    def run(tps: float, ttft: float = 10.0) -> list[dict[str, float]]:
        return [{"concurrency": 8, "tokens_per_s": tps, "ttft_p50_ms": ttft, "ttft_p99_ms": 2 * ttft}]

    engine = [run(2000), run(1500), run(1600), run(2200)]  # before round 1, after rounds 1, 2, 3
    ours = [run(1800, 40), run(1200, 60), run(2000, 30)]
    (level,) = paired_rounds(engine, ours)
    assert [r["engine_tokens_per_s"] for r in level["rounds"]] == [2000, 1600, 2200]
    assert [r["ratio"] for r in level["rounds"]] == [0.9, 0.75, 0.909]
    assert level["median_ratio"] == 0.9 and level["median_added_ttft_p50_ms"] == 30.0


def test_the_rollouts_repeats_keep_the_fastest_with_every_run() -> None:
    from loadtests.rollouts import best

    runs = [{"samples_per_s": 80.0}, {"samples_per_s": 95.5}]
    assert best(runs) == {"samples_per_s": 95.5, "runs_samples_per_s": [80.0, 95.5]}
