"""run_python: a program to the OS sandbox here, to a remote runner, or (allowed only) the weak path."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import asdict, fields
from pathlib import Path

import structlog

from shared.rewards.sandbox.bwrap import _BWRAP_ENV, _bwrap_argv, _maybe_lease, _program_fds
from shared.rewards.sandbox.limits import Limits, SandboxConfig, SandboxResult
from shared.rewards.sandbox.probe import _probe
from shared.rewards.sandbox.process import supervise
from shared.rewards.sandbox.weak import _run_weak

log = structlog.get_logger(__name__)

DEFAULT_LIMITS = Limits()


def _uid_processes(uid: int) -> list[int]:
    """Host pids whose real uid is `uid`."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(d))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return found


async def _drain_uid(uid: int, timeout_s: float = 5.0) -> None:
    """Wait until nothing runs as `uid` before its lease goes back.

    bwrap exits as soon as the program does; its PID namespace is torn down just after (its
    init dies with bwrap). Until that is done the dying processes still count towards the
    next program's RLIMIT_NPROC under the same uid.
    """
    deadline = time.monotonic() + timeout_s
    while pids := await asyncio.to_thread(_uid_processes, uid):
        if time.monotonic() > deadline:
            log.warning("code sandbox: processes outlived their sandbox; killing", uid=uid, pids=pids)
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            return
        await asyncio.sleep(0.01)


async def _run_isolated(code: str, limits: Limits, bwrap: str, uid_base: int) -> SandboxResult:
    with _program_fds(code) as (code_fd, bpf_fd), _maybe_lease(uid_base) as uid:
        argv = _bwrap_argv(bwrap, limits, uid, code_fd, bpf_fd)
        fds = [fd for fd in (code_fd, bpf_fd) if fd is not None]
        try:
            return await supervise(argv, limits, isolated=True, env=_BWRAP_ENV, pass_fds=fds)
        finally:
            if uid is not None:
                await _drain_uid(uid)


async def _run_remote(url: str, code: str, limits: Limits) -> SandboxResult:
    """POST the program to a sandbox runner; a runner that cannot answer is a dependency outage
    (the bus retries the group), never a zero reward."""
    import httpx

    from shared.runtime.envelope import DependencyUnavailable

    try:
        async with httpx.AsyncClient(timeout=limits.timeout_s + 30) as client:
            r = await client.post(url.rstrip("/") + "/run", json={"code": code, "limits": asdict(limits)})
    except httpx.HTTPError as exc:
        raise DependencyUnavailable("sandbox", f"{type(exc).__name__}: {exc}") from None
    if r.status_code >= 500 or r.status_code == 429:
        raise DependencyUnavailable("sandbox", f"runner answered {r.status_code}")
    r.raise_for_status()
    body = r.json()
    return SandboxResult(**{f.name: body[f.name] for f in fields(SandboxResult) if f.name in body})


async def run_python(
    code: str,
    limits: Limits = DEFAULT_LIMITS,
    workdir: Path | None = None,
    *,
    config: SandboxConfig | None = None,
) -> SandboxResult:
    """Run `code` as a script under the limits in the OS sandbox; never raises for what the code
    does. Without OS isolation the answer is `unavailable` (reason sandbox_unavailable) unless the
    config allows the weak path. `workdir` holds the weak path's temp dir."""
    cfg = config or SandboxConfig.from_settings()
    if cfg.url:
        return await _run_remote(cfg.url, code, limits)
    if await asyncio.to_thread(_probe, cfg.bwrap, cfg.uid_base):
        try:
            return await _run_isolated(code, limits, cfg.bwrap, cfg.uid_base)
        except RuntimeError as exc:  # no free uid: saturated, not the code's fault: retry later
            from shared.runtime.envelope import DependencyUnavailable

            raise DependencyUnavailable("sandbox", str(exc)) from None
    if cfg.allow_weak:
        return await _run_weak(code, limits, workdir)
    return SandboxResult(
        None, "", "no OS isolation for untrusted code (see the service log)", unavailable=True
    )
