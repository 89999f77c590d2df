"""Running one program: a process group under a wall clock and an output cap."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from shared.rewards.sandbox.limits import Limits, SandboxResult


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def supervise(argv: list[str], limits: Limits, *, isolated: bool, **popen: Any) -> SandboxResult:
    """Start argv in its own process group; enforce the wall clock and the output cap."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: one killpg ends it all
        **popen,
    )
    out, err = bytearray(), bytearray()
    exceeded = False

    async def pump(stream: asyncio.StreamReader, buf: bytearray) -> None:
        nonlocal exceeded
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            if exceeded:
                continue  # drain until EOF so the pipes close with the process
            room = limits.max_output_bytes - len(out) - len(err)
            buf.extend(chunk[: max(0, room)])
            if len(chunk) > room:
                exceeded = True
                _kill_group(proc)

    assert proc.stdout is not None and proc.stderr is not None
    pumps = asyncio.gather(pump(proc.stdout, out), pump(proc.stderr, err))
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(pumps), timeout=limits.timeout_s)
        await asyncio.wait_for(proc.wait(), timeout=max(0.1, limits.timeout_s - (time.monotonic() - start)))
    except TimeoutError:
        timed_out = True
    finally:
        _kill_group(proc)
        try:
            await asyncio.wait_for(proc.wait(), timeout=5)
        except TimeoutError:
            pass
        try:
            await asyncio.wait_for(asyncio.shield(pumps), timeout=2)
        except TimeoutError:
            pumps.cancel()
            await asyncio.gather(pumps, return_exceptions=True)
    rc = proc.returncode
    if rc == -signal.SIGXCPU or rc == 128 + signal.SIGXCPU:
        timed_out = True
    return SandboxResult(
        returncode=rc,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        timed_out=timed_out,
        output_exceeded=exceeded,
        duration_s=time.monotonic() - start,
        isolated=isolated,
    )
