"""Test helpers around the real embedded broker: produce, collect, run service processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from shared.runtime.procs import free_port

ROOT = Path(__file__).resolve().parents[2]


async def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    headers: list[tuple[str, bytes]] | None = None,
    keys: list[bytes | None] | None = None,
    max_request_size: int = 16 << 20,
) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=max_request_size, acks="all")
    await p.start()
    try:
        futs = []
        for i, v in enumerate(values):
            key = keys[i] if keys else None
            futs.append(await p.send(topic, v, key=key, headers=list(headers or [])))
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def collect(
    bootstrap: str, topic: str, n: int, timeout_s: float = 30.0, until: object = None
) -> list[ConsumerRecord]:
    """Read a topic from the start (no group) until n records (or `until(records)`) or timeout."""
    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        max_partition_fetch_bytes=32 << 20,
    )
    await c.start()
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=100)
            for recs in batch.values():
                out.extend(recs)
            if (until is not None and until(out)) or (until is None and len(out) >= n):  # type: ignore[operator]
                break
    finally:
        await c.stop()
    return out


def service_env(bootstrap: str, prefix: str, var_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    env.update(
        PYTHONUNBUFFERED="1",
        SY_ENV="dev",  # a test broker is not production (shared/runtime/config/ Settings.production)
        SY_KAFKA_BOOTSTRAP=bootstrap,
        SY_KAFKA_EMBEDDED="true",  # the test broker is the embedded Tansu
        SY_TOPIC_PREFIX=prefix,
        SY_KAFKA_SESSION_TIMEOUT_MS="2000",
        SY_KAFKA_HEARTBEAT_INTERVAL_MS="500",
        SY_KAFKA_COMMIT_INTERVAL_MS="50",
        SY_VAR_DIR=str(var_dir),
        SY_TRACE_FILE=str(var_dir / "spans.jsonl"),
        SY_DRAIN_TIMEOUT_S="5",
    )
    env.update(extra)
    return env


class ServiceProc:
    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        env = dict(env, SY_HEALTH_PORT=str(self.port))
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited {self.proc.returncode}: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"not ready: {self.log_path.read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@contextmanager
def services(
    names: list[str], env: dict[str, str], log_dir: Path, ready_timeout_s: float = 30.0
) -> Iterator[dict[str, ServiceProc]]:
    procs = {
        n: ServiceProc([sys.executable, "-m", f"services.{n}.main"], env, log_dir / f"{n}.log") for n in names
    }
    try:
        for p in procs.values():
            p.wait_ready(ready_timeout_s)
        yield procs
    finally:
        for p in procs.values():
            p.stop()
