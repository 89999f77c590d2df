"""A second (third, …) replica of a service beside a running `switchyard up` stack.

It is started as the launcher started its own child (that process's environment, read from
/proc), with another instance id and health port: the same broker, Redis, Milvus and object
store. The e2e scale-out test and the `replies` benchmark use it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from shared.runtime.procs import free_port

ROOT = Path(__file__).resolve().parents[2]


class Replica:
    """One more process of `service`; `env` overrides settings of the launcher's child."""

    def __init__(
        self, endpoints: dict[str, Any], var_dir: Path, service: str, n: int = 2, **env: str
    ) -> None:
        pid = endpoints["services"][service]["pid"]
        raw = Path(f"/proc/{pid}/environ").read_bytes()
        child = dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)
        self.port = free_port()
        child.update(SY_INSTANCE_ID=f"{service}-{n}", SY_HEALTH_PORT=str(self.port), **env)
        self.log = var_dir / f"{service}-{n}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{service}.main"],
            cwd=ROOT,
            env=child,
            stdout=open(self.log, "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def wait_ready(self, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica exited: {self.tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(self.tail())

    def wait_alive(self, timeout_s: float = 240) -> None:
        """Up and serving /healthz (a stage replica may still wait for partitions)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica exited: {self.tail()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(self.tail())

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def counter(url: str, name: str) -> float:
    """A counter's value on a service's /metrics (0 when absent)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
