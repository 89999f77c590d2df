"""Child-process helpers for the launcher and embedded parts: no orphans, bounded stops."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: the kernel SIGKILLs the child when the launcher dies, even by SIGKILL."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def child_setup(cpus: frozenset[int] | set[int] | None = None) -> Callable[[], None]:
    """preexec_fn: die with the parent and, given `cpus`, start on those cores (the child and
    whatever it forks keep them; see shared/runtime/cpus.py)."""
    if cpus is None:
        return die_with_parent
    chosen = frozenset(cpus)

    def setup() -> None:
        die_with_parent()
        os.sched_setaffinity(0, chosen)

    return setup


def rss_bytes(pid: int) -> int | None:
    """Resident memory of a process (VmRSS of /proc/<pid>/status); None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None  # a zombie has no VmRSS line


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def wait_port(port: int, host: str = "127.0.0.1", timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def kill_group(pgid: int, grace_s: float = 0.0) -> None:
    """SIGKILL what is left of a process group once its leader is gone, after `grace_s`.

    A service's own children (vLLM's EngineCore) share its group; they outlive a leader that
    was SIGKILLed or that exited without stopping them, so the group is cleared as a whole.
    """
    deadline = time.monotonic() + grace_s
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> int | None:
    """SIGTERM the child, SIGKILL its process group after timeout_s; leave nothing of the group.

    SIGTERM goes to the child alone, as Kubernetes sends it to a container's first process: a
    service drains with its helpers still up (the vLLM worker finishes generating on its
    EngineCore, which a group-wide SIGTERM would stop at once) and stops them itself.
    """
    if proc.poll() is not None:
        kill_group(proc.pid)
        return proc.returncode
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        return proc.poll()
    try:
        code: int | None = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = proc.wait(timeout=5)
    kill_group(proc.pid, grace_s=2.0)
    return code
