"""The benchmark starters build the environment each scenario's configurations ask for (a
scenario that cannot start its stack is only found when someone runs `make bench`)."""

from __future__ import annotations

from pathlib import Path

from loadtests.lora import Stack
from loadtests.stack import stack_env


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
