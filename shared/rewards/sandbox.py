"""Run untrusted Python (a model's code plus its unit tests) in a contained subprocess.

Layers, outermost first:
- a fresh network namespace (no interfaces but a down loopback: no network) and a fresh PID
  namespace whose init dies with the sandbox, so every process it forked dies with it
  (`unshare --net --pid --fork --kill-child`; with a user namespace when not root);
- an unprivileged user (nobody) when the service runs as root, so RLIMIT_NPROC bounds forks
  and file permissions keep it out of the service's files;
- rlimits: CPU seconds, address space, file size, open files, processes, no core dumps;
- a wall-clock timeout that SIGKILLs the whole process group, and an output cap (reading
  stops and the group is killed once stdout+stderr pass it);
- inside the interpreter, an audit hook (installed before the code runs) that refuses
  sockets, subprocesses/forks/exec, ctypes, and opening files for writing outside the
  sandbox's temp dir.
Which OS layers are active is probed once (`isolation()`) and logged; the audit hook and
rlimits apply everywhere.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

NOBODY = 65534

# Runs in the sandboxed interpreter before the untrusted code. Kept small and dependency-free.
_RUNNER = r"""
import os, sys
_ROOT = os.path.realpath(os.getcwd())
_DENY_EVENTS = {
    "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo", "socket.__new__",
    "subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec",
    "os.spawn", "os.kill", "os.killpg", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "os.chmod", "os.chown", "os.symlink", "os.link", "shutil.rmtree", "os.putenv",
}
_DENY_MODULES = {
    "ctypes", "_ctypes", "socket", "_socket", "multiprocessing", "_multiprocessing", "subprocess",
    "_posixsubprocess", "pty", "asyncio",
}
def _inside(path):
    try:
        p = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return p == _ROOT or p.startswith(_ROOT + os.sep) or p == "/dev/null"
def _hook(event, args):
    if event in _DENY_EVENTS:
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "import" and args and str(args[0]).split(".")[0] in _DENY_MODULES:
        raise PermissionError(f"sandbox: import of {args[0]} is not allowed")
    if event == "open" and len(args) >= 2:
        path, mode = args[0], args[1]
        flags = args[2] if len(args) > 2 else None
        writes = False
        if isinstance(mode, str):
            writes = any(c in mode for c in "wax+")
        for bits in (mode, flags):
            if isinstance(bits, int) and not isinstance(bits, bool):
                writes = writes or bool(bits & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
        if writes and not isinstance(path, int) and not _inside(path):
            raise PermissionError(f"sandbox: writing {path!r} outside the sandbox dir is not allowed")
    if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.utime"):
        for p in args[:2]:
            if isinstance(p, (str, bytes, os.PathLike)) and not _inside(p):
                raise PermissionError(f"sandbox: {event} outside the sandbox dir is not allowed")
sys.addaudithook(_hook)
_src = open("main.py", encoding="utf-8").read()
_code = compile(_src, "main.py", "exec")
del _src
exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0  # wall clock
    cpu_s: int = 5
    memory_mb: int = 512  # address space
    max_output_bytes: int = 64 * 1024  # stdout + stderr
    max_file_bytes: int = 1 << 20
    max_processes: int = 64  # of the sandbox user (root: nobody); forks are refused by the hook anyway
    max_open_files: int = 64


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_exceeded: bool = False
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.output_exceeded

    def reason(self) -> str:
        if self.timed_out:
            return "timeout"
        if self.output_exceeded:
            return "output limit exceeded"
        if self.returncode == 0:
            return "passed"
        if self.returncode is not None and self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        last = (self.stderr.strip().splitlines() or [""])[-1][:200]
        return f"exit {self.returncode}: {last}"


@lru_cache(maxsize=1)
def isolation() -> tuple[str, ...]:
    """The OS-level wrapper available here: probed once by running `true` through it."""
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    candidates: list[tuple[str, ...]] = []
    if unshare and os.geteuid() == 0 and setpriv:
        candidates.append(
            (
                unshare,
                "--net",
                "--pid",
                "--fork",
                "--kill-child",
                "--",
                setpriv,
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--clear-groups",
                "--",
            )
        )
    if unshare:
        candidates.append(
            (unshare, "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--")
        )
    for prefix in candidates:
        try:
            r = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return prefix
    return ()


def _drops_to_nobody(prefix: tuple[str, ...]) -> bool:
    return any(p.startswith("--reuid=") for p in prefix)


def _limit_child(limits: Limits, nproc: bool) -> None:
    """preexec_fn: rlimits for the child and everything it starts (inherited across exec).

    RLIMIT_NPROC counts every process of the user, so it is set only when the code runs as
    nobody; otherwise the audit hook and the PID namespace bound forks.
    """
    mem = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def run_python(code: str, limits: Limits = Limits(), workdir: Path | None = None) -> SandboxResult:
    """Run `code` as a script in a fresh temp dir under the limits; never raises for what the code does."""
    prefix = isolation()
    tmp = Path(tempfile.mkdtemp(prefix="sy-sandbox-", dir=workdir))
    try:
        (tmp / "main.py").write_text(code, encoding="utf-8")
        (tmp / "runner.py").write_text(_RUNNER, encoding="utf-8")
        nobody = _drops_to_nobody(prefix)
        if nobody:
            for p in (tmp, tmp / "main.py", tmp / "runner.py"):
                os.chown(p, NOBODY, NOBODY)
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
            "HOME": str(tmp),
        }
        argv = [*prefix, sys.executable, "-I", "-B", "runner.py"]
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=tmp,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: one killpg ends it all
            preexec_fn=lambda: _limit_child(limits, nobody),
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
            await asyncio.wait_for(
                proc.wait(), timeout=max(0.1, limits.timeout_s - (time.monotonic() - start))
            )
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
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
