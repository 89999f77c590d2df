from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.runtime.procs import free_port
from tests.helpers.kafka import ROOT

# TEST_MODELS_DIR: use an existing models folder (holding sy-tiny/) instead of building one.
MODELS_DIR = Path(os.environ.get("TEST_MODELS_DIR") or ROOT / "var" / "models")


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The project's own small model, built once and cached under var/models (as `make run` does)."""
    if os.environ.get("TEST_MODELS_DIR"):
        return MODELS_DIR / "sy-tiny"
    from shared.devstack.models.build import build_model

    return build_model("sy-tiny", MODELS_DIR, progress=False)


class Pipeline:
    def __init__(self, var_dir: Path, services: list[str] | None = None, **extra_env: str) -> None:
        self.var_dir = var_dir
        self.gateway_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
        env.update(
            SY_ENV="dev",  # test brokers and stores are not production endpoints
            SY_VAR_DIR=str(var_dir),
            SY_MODELS_DIR=str(MODELS_DIR),
            SY_DRAIN_TIMEOUT_S="5",
            PYTHONUNBUFFERED="1",
            # The launcher's canary sends requests as tenant-a every 30 s idle: not in these tests' counts.
            SY_CANARY_INTERVAL_S="0",
            SY_API_KEYS=json.dumps({"sk-a": "tenant-a", "sk-b": "tenant-b"}),
            # Repeated temperature-0 prompts would be cache hits; these tests are about serving.
            # The semantic cache has its own tests (tests/integration/test_cache_milvus.py).
            SY_CACHE_ENABLED="false",
            # a second pool that no worker serves: requests for its model can only time out
            SY_POOLS=json.dumps(
                [
                    {"name": "vllm", "engine": "vllm", "models": ["sy-tiny"], "max_lora_rank": 8},
                    {"name": "ghost", "engine": "vllm", "models": ["ghost-model"]},
                ]
            ),
        )
        env.update(extra_env)
        self.env = env
        self.log_path = var_dir / "up.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shared.devstack.cli",
                "up",
                *(["--services", ",".join(services)] if services else []),
            ],
            cwd=ROOT,
            env=env,
            stdout=open(self.log_path, "wb"),
            stderr=subprocess.STDOUT,  # noqa: SIM115
            start_new_session=True,
        )
        self.endpoints_path = var_dir / "run" / "endpoints.json"

    def wait_up(self, timeout_s: float = 240) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            if self.endpoints_path.exists():
                self.endpoints = json.loads(self.endpoints_path.read_text())
                return self.endpoints
            time.sleep(0.5)
        raise TimeoutError(self.output())

    @property
    def base_url(self) -> str:
        return self.endpoints["services"]["gateway"]["url"] + "/v1"

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def pipeline(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path_factory.mktemp("pipeline"))
    try:
        p.wait_up()
        # Warm the path once: the first request also waits for every consumer group to settle.
        httpx.post(
            p.base_url + "/chat/completions",
            timeout=120,
            headers={"Authorization": "Bearer sk-a"},
            json={"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        yield p
    finally:
        p.stop()
