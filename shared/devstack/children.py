"""The launcher's child processes: how one is started, its output copied, its readiness awaited,
and how long to wait before restarting one that died.

Children get their own process group and die with the launcher (PDEATHSIG, shared.runtime.procs);
what a dead service started (vLLM's EngineCore) is killed with it before the restart.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from shared.runtime.procs import child_setup, kill_group

# Restart backoff: 0.5 s doubling up to 30 s; a child that ran a minute starts over at 0.5 s.
RESTART_FIRST_S = 0.5
RESTART_MAX_S = 30.0
RESTART_RESET_AFTER_S = 60.0


@dataclass
class Child:
    name: str
    port: int
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    exits: dict[str, int] = field(default_factory=dict)  # why it died: "SIGKILL" (OOM killer?), "code 1"
    started_at: float = 0.0
    pump: asyncio.Task[None] | None = None
    log_path: Path = field(default_factory=Path)

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-m", f"services.{self.name}.main"]

    def spawn(self, cpus: frozenset[int] | None) -> subprocess.Popen[bytes]:
        """Start it (on `cpus`, or the launcher's own), output piped for `pump`."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=child_setup(cpus),
        )
        self.started_at = time.monotonic()
        return self.proc

    def died(self) -> tuple[int, float] | None:
        """When it exited: count the cause, kill what it left, and say (exit code, restart delay)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        why = f"{signal.Signals(-code).name}" if code < 0 else f"code {code}"
        self.exits[why] = self.exits.get(why, 0) + 1
        kill_group(self.proc.pid)  # what the dead service started (vLLM's EngineCore) goes too
        delay = min(RESTART_MAX_S, RESTART_FIRST_S * 2 ** min(self.restarts, 6))
        if time.monotonic() - self.started_at > RESTART_RESET_AFTER_S:
            self.restarts, delay = 0, RESTART_FIRST_S
        self.restarts += 1
        self.proc = None
        return code, delay


async def pump(
    child: Child,
    proc: subprocess.Popen[bytes],
    pool: ThreadPoolExecutor,
    say: Callable[[str], None],
    width: int,
) -> None:
    """Copy a child's output to var/run/logs/<name>.log and to our stdout, prefixed."""
    assert proc.stdout is not None
    loop = asyncio.get_running_loop()
    with open(child.log_path, "ab") as f:  # noqa: ASYNC230 - one open per child start
        while True:
            line = await loop.run_in_executor(pool, proc.stdout.readline)
            if not line:
                break
            f.write(line)
            f.flush()
            say(f"{child.name:<{width}} | {line.decode(errors='replace').rstrip()}")


async def wait_ready(children: list[Child], host: str, timeout_s: float) -> None:
    """Until every child answers /readyz 200; a child that exits first, or the timeout, raises."""
    deadline = time.monotonic() + timeout_s
    pending = {c.name: c for c in children}
    async with httpx.AsyncClient(timeout=1.0) as http:
        while pending:
            for name, c in list(pending.items()):
                if c.proc is not None and c.proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {c.proc.returncode}; see {c.log_path}")
                try:
                    r = await http.get(f"http://{host}:{c.port}/readyz")
                    if r.status_code == 200:
                        del pending[name]
                except httpx.HTTPError:
                    pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"not ready after {timeout_s:.0f}s: {sorted(pending)}")
            await asyncio.sleep(0.2)


class Server(Protocol):
    """An embedded server (EmbeddedMilvus, EmbeddedTriton): start blocks until it is up."""

    def start(self) -> None: ...
    def alive(self) -> bool: ...
    def stop(self) -> None: ...


class Background:
    """An embedded server started in a thread, so the services start while it comes up (they wait
    for it in their readiness); it died when its start has returned and it is not alive."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.starting: asyncio.Future[None] | None = None

    def start(self) -> None:
        self.starting = asyncio.get_running_loop().run_in_executor(None, self.server.start)

    def died(self) -> bool:
        return self.starting is not None and self.starting.done() and not self.server.alive()

    async def stop(self) -> None:
        """Stop it, let a start still under way give up (once killed), and stop what it started."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.server.stop)
        if self.starting is not None:
            await asyncio.wait({self.starting}, timeout=30)
        await loop.run_in_executor(None, self.server.stop)
