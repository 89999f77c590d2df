"""The weak path (SY_SANDBOX_ALLOW_WEAK only): rlimits and an audit hook under the service's own uid."""

from __future__ import annotations

import resource
import shutil
import sys
import tempfile
from pathlib import Path

import structlog

from shared.rewards.sandbox.limits import Limits, SandboxResult
from shared.rewards.sandbox.process import supervise

log = structlog.get_logger(__name__)

# The weak path only (SY_SANDBOX_ALLOW_WEAK): runs in the interpreter before the untrusted code.
# A speed bump, not a boundary; kept small and dependency-free.
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


def _limit_weak(limits: Limits) -> None:
    """preexec_fn of the weak path: rlimits for the child and everything it starts.

    No RLIMIT_NPROC: it would count every process of the service's own uid.
    """
    mem = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


async def _run_weak(code: str, limits: Limits, workdir: Path | None) -> SandboxResult:
    """SY_SANDBOX_ALLOW_WEAK only: the service's uid, rlimits and the audit hook, no namespaces."""
    log.warning("code sandbox: running untrusted code WITHOUT OS isolation (SY_SANDBOX_ALLOW_WEAK=true)")
    tmp = Path(tempfile.mkdtemp(prefix="sy-sandbox-", dir=workdir))
    try:
        (tmp / "main.py").write_text(code, encoding="utf-8")
        (tmp / "runner.py").write_text(_RUNNER, encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp), "LANG": "C.UTF-8"}
        argv = [sys.executable, "-I", "-B", "-X", "utf8", "runner.py"]
        return await supervise(
            argv, limits, isolated=False, cwd=tmp, env=env, preexec_fn=lambda: _limit_weak(limits)
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
