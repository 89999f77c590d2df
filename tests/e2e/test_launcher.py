"""`switchyard up` as a user runs it: readiness, flow, supervision, clean stop, no orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from shared.runtime.envelope import decode
from shared.runtime.procs import free_port
from tests.helpers.kafka import ROOT, collect, produce

pytestmark = pytest.mark.slow


def _request(rid: str) -> bytes:
    return json.dumps(
        {
            "request_id": rid,
            "tenant": "acme",
            "kind": "KIND_CHAT",
            "model": "sy-tiny",
            "request": {"messages": [{"role": "user", "content": "hello"}]},
        }
    ).encode()


class Up:
    def __init__(self, var_dir: Path, *args: str, **extra_env: str) -> None:
        self.var_dir = var_dir
        env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
        env.update(
            SY_ENV="dev",  # test brokers and stores are not production endpoints
            SY_VAR_DIR=str(var_dir),
            SY_KAFKA_PORT=str(free_port()),
            SY_DRAIN_TIMEOUT_S="5",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra_env)
        env = {k: v for k, v in env.items() if v != ""}
        self.log = open(var_dir / "up.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shared.devstack.cli", "up", *args],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.endpoints = var_dir / "run" / "endpoints.json"

    def wait_up(self, timeout_s: float = 90) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            if self.endpoints.exists():
                return json.loads(self.endpoints.read_text())
            time.sleep(0.2)
        raise TimeoutError(self.output())

    def output(self) -> str:
        return (self.var_dir / "up.log").read_text(errors="replace")[-5000:]

    def tree(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)


def _gone(pids: list[int], timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = pids
    while time.monotonic() < deadline:
        alive = [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        if not alive:
            break
        time.sleep(0.1)
    return alive


def _wait_for(pred, timeout_s: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise TimeoutError(what)


async def test_up_serves_supervises_and_stops_without_orphans(tmp_path: Path) -> None:
    up = Up(tmp_path, "--services", "preprocess,cache,router")
    try:
        info = up.wait_up()
        out = up.output()
        assert "switchyard is up" in out and info["kafka"] in out
        assert set(info["services"]) >= {"preprocess", "cache", "router"}
        bootstrap = info["kafka"]

        await produce(
            bootstrap, "sy.requests", [_request("e2e-1")], headers=[("content-type", b"application/json")]
        )
        recs = await collect(bootstrap, "sy.infer.vllm", 1, timeout_s=30)
        assert [decode(r.value).request_id for r in recs] == ["e2e-1"], up.output()

        topics = subprocess.run(
            [sys.executable, "-m", "shared.devstack.cli", "topics", "--json"],
            cwd=ROOT,
            env={**os.environ, "SY_VAR_DIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert topics.returncode == 0, topics.stderr
        rows = json.loads(topics.stdout)
        assert sum(r["end"] for r in rows if r["topic"] == "sy.infer.vllm") >= 1
        assert any(r["topic"] == "sy.requests" and r["group"] == "sy.preprocess" for r in rows)

        # A crashed service is restarted by the launcher.
        old = info["services"]["preprocess"]["pid"]
        os.kill(old, signal.SIGKILL)
        _wait_for(
            lambda: json.loads(up.endpoints.read_text())["services"]["preprocess"]["pid"] != old,
            what="preprocess not restarted",
        )

        # The embedded broker is restarted on the same port and its topics re-created.
        broker = next(p for p in up.tree() if "tansu" in p.name() or "tansu" in " ".join(p.cmdline()))
        broker.kill()
        _wait_for(lambda: "topics re-created" in up.output(), what="broker not restarted")
        await produce(
            bootstrap, "sy.requests", [_request("e2e-2")], headers=[("content-type", b"application/json")]
        )
        recs = await collect(bootstrap, "sy.infer.vllm", 1, timeout_s=60)
        assert "e2e-2" in [decode(r.value).request_id for r in recs], up.output()

        pids = [p.pid for p in up.tree()]
        assert len(pids) >= 4, up.output()  # broker + three stages
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(timeout=60) == 0, up.output()
        assert _gone(pids) == [], f"orphans left behind: {up.output()}"
        assert "stopped" in up.output()
        assert not up.endpoints.exists()
    finally:
        if up.proc.poll() is None:
            os.killpg(up.proc.pid, signal.SIGKILL)


def test_children_die_with_a_sigkilled_launcher(tmp_path: Path) -> None:
    # No cache, so no Milvus: this is about PDEATHSIG, and a Milvus start on a loaded box can outlast wait_up.
    up = Up(tmp_path, "--services", "preprocess,router")
    try:
        up.wait_up()
        pids = [p.pid for p in up.tree()]
        assert pids
        os.kill(up.proc.pid, signal.SIGKILL)  # no chance to clean up: PDEATHSIG must do it
        up.proc.wait(timeout=10)
        assert _gone(pids, timeout_s=15) == []
    finally:
        if up.proc.poll() is None:
            os.killpg(up.proc.pid, signal.SIGKILL)


async def test_external_broker_is_used_and_no_embedded_one_started(
    tmp_path: Path, broker, prefix: str
) -> None:
    up = Up(
        tmp_path,
        "--services",
        "router",
        SY_KAFKA_BOOTSTRAP=broker.bootstrap,
        SY_TOPIC_PREFIX=prefix,
        SY_KAFKA_PORT="",
    )
    try:
        info = up.wait_up()
        assert info["kafka"] == broker.bootstrap and info["embedded_kafka"] is False
        assert list(info["services"]) == ["router"]
        assert not [p for p in up.tree() if "tansu" in " ".join(p.cmdline())]
        assert f"using {broker.bootstrap} (SY_KAFKA_BOOTSTRAP)" in up.output()
        from shared.runtime.config import load_settings
        from shared.runtime.kafka_admin import topic_report

        rows = await topic_report(load_settings(kafka_bootstrap=broker.bootstrap, topic_prefix=prefix))
        assert f"{prefix}routing" in {r.topic for r in rows}, "launcher did not create the topics"
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(timeout=60) == 0
    finally:
        if up.proc.poll() is None:
            os.killpg(up.proc.pid, signal.SIGKILL)
