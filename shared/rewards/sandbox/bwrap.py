"""The bwrap command line and what it is handed: the program and filter as memfds, a leased uid."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from shared.rewards.sandbox.limits import NOBODY, UID_POOL, Limits
from shared.rewards.sandbox.seccomp import seccomp_filter

_BWRAP_ENV = {"PATH": "/usr/bin:/bin"}  # bwrap's own environment: nothing of the service's


# ------------------------------------------------------------------------------ the bwrap command
def _resolve(binary: str) -> str | None:
    found = shutil.which(binary) if os.sep not in binary else binary
    return found if found and os.access(found, os.X_OK) else None


def _root_binds() -> list[str]:
    """Read-only binds of what the interpreter needs; parent dirs made 0755 (bwrap makes 0700)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--perms", "0755", "--dir", "/etc"]
    for etc in ("/etc/ld.so.cache", "/etc/localtime"):
        args += ["--ro-bind-try", etc, etc]
    made: set[str] = {"/", "/usr"}
    for prefix in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}):
        if prefix == "/usr" or prefix.startswith("/usr/"):
            continue
        parents = [str(p) for p in reversed(Path(prefix).parents) if str(p) not in made]
        for p in parents:
            args += ["--perms", "0755", "--dir", p]
            made.add(p)
        args += ["--ro-bind", prefix, prefix]
    return args


def _bwrap_argv(
    bwrap: str, limits: Limits, uid: int | None, code_fd: int, seccomp_fd: int | None
) -> list[str]:
    """The whole command: bwrap, the uid drop, the rlimits, then Python on /sandbox/main.py."""
    tmpfs = str(limits.tmpfs_mb * 1024 * 1024)
    argv = [
        bwrap,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        *_root_binds(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        tmpfs,
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        tmpfs,
        "--tmpfs",
        "/sandbox",
        "--perms",
        "0444",
        "--file",
        str(code_fd),
        "/sandbox/main.py",
        "--chdir",
        "/sandbox",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/sandbox",
        "--setenv",
        "LANG",
        "C.UTF-8",
    ]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if uid is not None:  # root: no user namespace; drop to the leased uid inside
        setpriv = _resolve("setpriv") or "/usr/bin/setpriv"
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP", "--"]
        argv += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs"]
        argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
    else:  # not root: a user namespace maps us to nobody, and no further ones
        argv += ["--unshare-user", "--disable-userns", "--uid", str(NOBODY), "--gid", str(NOBODY), "--"]
    mem = limits.memory_mb * 1024 * 1024
    argv += [
        _resolve("prlimit") or "/usr/bin/prlimit",
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        f"--as={mem}:{mem}",
        f"--nproc={limits.max_processes}:{limits.max_processes}",
        f"--fsize={limits.max_file_bytes}:{limits.max_file_bytes}",
        f"--nofile={limits.max_open_files}:{limits.max_open_files}",
        "--core=0:0",
        "--",
        sys.executable,
        "-I",
        "-B",
        "-X",
        "utf8",
        "main.py",
    ]
    return argv


# ------------------------------------------------------------------------------ uid leases
@contextlib.contextmanager
def _lease_uid(base: int) -> Iterator[int]:
    """One uid of base..base+63 no other program (of any process here) runs under right now.

    RLIMIT_NPROC counts every process of a uid on the host, so concurrent programs under one uid
    would starve each other (and whatever else runs as it); a flock per uid keeps them apart.
    """
    locks = Path(tempfile.gettempdir()) / "sy-sandbox-uids"
    locks.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(locks)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise RuntimeError(f"{locks} is not a private directory of this user")
    for uid in range(base, base + UID_POOL):
        fd = os.open(locks / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            os.close(fd)
        return
    raise RuntimeError(f"all {UID_POOL} sandbox uids from {base} are busy")


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)  # pass_fds makes it inheritable in bwrap only
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@contextlib.contextmanager
def _program_fds(code: str) -> Iterator[tuple[int, int | None]]:
    """The program and the seccomp filter as memfds for bwrap to read (no file on the host)."""
    bpf = seccomp_filter()
    code_fd = _memfd("main.py", code.encode("utf-8"))
    bpf_fd = _memfd("seccomp", bpf) if bpf is not None else None
    try:
        yield code_fd, bpf_fd
    finally:
        for fd in (code_fd, bpf_fd):
            if fd is not None:
                os.close(fd)


@contextlib.contextmanager
def _maybe_lease(uid_base: int) -> Iterator[int | None]:
    """A leased uid when we are root (setpriv drops to it), None otherwise (a user namespace)."""
    if os.geteuid() != 0:
        yield None
        return
    with _lease_uid(uid_base) as uid:
        yield uid
