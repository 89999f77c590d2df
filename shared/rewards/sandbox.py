"""Run untrusted Python (a model's code plus its unit tests) in an OS sandbox that fails closed.

The code of `code_tests` is hostile by assumption, so it runs under bubblewrap (`bwrap`):
- its own PID, mount, network, IPC and UTS namespaces: a fresh /proc that shows only its own
  processes (not the service's environment, not its pid to signal), no network but a private
  loopback, and everything it forked dies with it;
- a clear environment (no SY_* secret reaches it) and a root of read-only binds of what Python
  needs (/usr, the interpreter's prefixes), a fresh /dev, and small private tmpfs for /tmp and
  its working dir /sandbox: nothing it writes lands on the host;
- another uid: when the service is root, one of 64 otherwise unused uids (SY_SANDBOX_UID..+63,
  one per concurrent program, so RLIMIT_NPROC counts that program alone) through `setpriv`,
  with every capability and the bounding set dropped; when it is not (the Kubernetes runner), a
  user namespace mapping it to 65534 with further user namespaces disabled;
- no_new_privs, rlimits (CPU, address space, processes and threads, file size, open files, no
  core) through `prlimit`, and on x86_64 a seccomp filter (ptrace, mount, namespaces, bpf,
  keyrings, io_uring, pidfds, kernel modules... answer EPERM; other ABIs are killed);
- a wall-clock timeout that SIGKILLs bwrap (its PID namespace goes with it) and an output cap.

`isolation()` probes all of that once per bwrap path by running a program through it. Without
it `run_python` refuses (`sandbox_unavailable`) unless SY_SANDBOX_ALLOW_WEAK=true, which runs
the old weak path: rlimits and an in-interpreter audit hook, under the service's own uid (logged
as a warning). With SY_SANDBOX_URL the program goes to a runner (`python -m
shared.rewards.sandbox`), its own Deployment in Kubernetes with no secrets and no egress.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import fcntl
import json
import os
import platform
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

NOBODY = 65534
UID_POOL = 64  # uids leased from SY_SANDBOX_UID when the service is root
RUNNER_PORT = 9120
MAX_CODE_BYTES = 1 << 20  # what the runner accepts in one request

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


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0  # wall clock
    cpu_s: int = 5
    memory_mb: int = 512  # address space
    max_output_bytes: int = 64 * 1024  # stdout + stderr
    max_file_bytes: int = 1 << 20
    max_processes: int = 64  # processes and threads of the program's uid
    max_open_files: int = 64
    tmpfs_mb: int = 16  # each of /tmp and /sandbox


# What a runner accepts (it serves whoever reaches it: bound every knob).
_LIMIT_BOUNDS: dict[str, tuple[float, float]] = {
    "timeout_s": (0.01, 60),
    "cpu_s": (1, 60),
    "memory_mb": (64, 4096),
    "max_output_bytes": (1, 1 << 22),
    "max_file_bytes": (1, 1 << 26),
    "max_processes": (4, 512),
    "max_open_files": (16, 4096),
    "tmpfs_mb": (1, 256),
}


@dataclass(frozen=True)
class SandboxConfig:
    """Where and how programs run; from the SY_SANDBOX_* settings unless given."""

    bwrap: str = "bwrap"
    allow_weak: bool = False
    uid_base: int = 64000
    url: str = ""

    @classmethod
    def from_settings(cls) -> SandboxConfig:
        from shared.runtime.config import get_settings

        s = get_settings()
        return cls(
            bwrap=s.sandbox_bwrap, allow_weak=s.sandbox_allow_weak, uid_base=s.sandbox_uid, url=s.sandbox_url
        )


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_exceeded: bool = False
    duration_s: float = 0.0
    isolated: bool = False  # ran under the OS sandbox (False: the weak path, or refused)
    unavailable: bool = False  # refused: no OS isolation here and the weak path not allowed

    @property
    def passed(self) -> bool:
        return (
            self.returncode == 0 and not self.timed_out and not self.output_exceeded and not self.unavailable
        )

    def reason(self) -> str:
        if self.unavailable:
            return "sandbox_unavailable"
        if self.timed_out:
            return "timeout"
        if self.output_exceeded:
            return "output limit exceeded"
        if self.returncode == 0:
            return "passed"
        if self.returncode is not None and self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        if self.isolated and self.returncode is not None and self.returncode > 128:
            return f"killed by signal {self.returncode - 128}"  # bwrap reports a signal as 128+n
        last = (self.stderr.strip().splitlines() or [""])[-1][:200]
        return f"exit {self.returncode}: {last}"


# ------------------------------------------------------------------------------ seccomp (x86_64)
# Syscalls a test program never needs and that widen the kernel surface or reach outside the
# sandbox: answered EPERM. Numbers are x86_64's; other architectures run without a filter.
_X86_64_DENY = {
    101: "ptrace",
    310: "process_vm_readv",
    311: "process_vm_writev",
    312: "kcmp",
    165: "mount",
    166: "umount2",
    155: "pivot_root",
    161: "chroot",
    272: "unshare",
    308: "setns",
    321: "bpf",
    298: "perf_event_open",
    323: "userfaultfd",
    248: "add_key",
    249: "request_key",
    250: "keyctl",
    175: "init_module",
    176: "delete_module",
    313: "finit_module",
    246: "kexec_load",
    320: "kexec_file_load",
    169: "reboot",
    167: "swapon",
    168: "swapoff",
    163: "acct",
    179: "quotactl",
    103: "syslog",
    303: "name_to_handle_at",
    304: "open_by_handle_at",
    424: "pidfd_send_signal",
    425: "io_uring_setup",
    426: "io_uring_enter",
    427: "io_uring_register",
    428: "open_tree",
    429: "move_mount",
    430: "fsopen",
    431: "fsconfig",
    432: "fsmount",
    433: "fspick",
    434: "pidfd_open",
    438: "pidfd_getfd",
    442: "mount_setattr",
}
_NR_CLONE, _NR_CLONE3, _NR_SOCKET = 56, 435, 41
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_CLONE_NS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_ALLOWED_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6 (the network namespace has only lo)
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_KILL_PROCESS, _RET_ALLOW = 0x80000000, 0x7FFF0000


def _ret_errno(e: int) -> int:
    return 0x00050000 | e


def seccomp_filter() -> bytes | None:
    """A classic-BPF seccomp program for `bwrap --seccomp`, or None where no table exists."""
    if platform.machine() != "x86_64":
        return None
    ins: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # arch: another ABI (i386 int 0x80) is killed
        (_JEQ, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET, 0, 0, _RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, 0),  # nr: the x32 ABI is killed
        (_JGE, 0, 1, _X32_BIT),
        (_RET, 0, 0, _RET_KILL_PROCESS),
    ]
    for nr in sorted(_X86_64_DENY):
        ins += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _ret_errno(errno.EPERM))]
    # clone3 hides its flags behind a pointer: ENOSYS makes libc fall back to clone.
    ins += [(_JEQ, 0, 1, _NR_CLONE3), (_RET, 0, 0, _ret_errno(errno.ENOSYS))]
    clone = [
        (_LD_W_ABS, 0, 0, 16),  # args[0]: the flags
        (_JSET, 0, 1, _CLONE_NS),
        (_RET, 0, 0, _ret_errno(errno.EPERM)),
        (_RET, 0, 0, _RET_ALLOW),
    ]
    ins += [(_JEQ, 0, len(clone), _NR_CLONE), *clone]
    n = len(_ALLOWED_FAMILIES)
    sock = [(_LD_W_ABS, 0, 0, 16)]  # args[0]: the address family
    sock += [(_JEQ, n - i, 0, fam) for i, fam in enumerate(_ALLOWED_FAMILIES)]
    sock += [(_RET, 0, 0, _ret_errno(errno.EAFNOSUPPORT)), (_RET, 0, 0, _RET_ALLOW)]
    ins += [(_JEQ, 0, len(sock), _NR_SOCKET), *sock]
    ins.append((_RET, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in ins)


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


# ------------------------------------------------------------------------------ probing
_PROBE = """
import os
assert os.getpid() < 10, os.getpid()  # a PID namespace of its own
assert os.getuid() != 0 and os.geteuid() != 0
assert set(os.environ) <= {"PATH", "HOME", "LANG", "PWD"}, sorted(os.environ)
devs = [ln.split(":")[0].strip() for ln in open("/proc/net/dev").read().splitlines()[2:]]
assert devs == ["lo"], devs  # a network namespace of its own
print("sandbox-ok")
"""


@lru_cache(maxsize=8)
def _probe(bwrap: str, uid_base: int) -> tuple[str, ...]:
    path = _resolve(bwrap)
    if path is None:
        log.error("code sandbox unavailable: bwrap not found", bwrap=bwrap)
        return ()
    root = os.geteuid() == 0
    needed = ["prlimit", *(["setpriv"] if root else [])]
    missing = [b for b in needed if _resolve(b) is None]
    if missing:
        log.error("code sandbox unavailable: util-linux tools missing", missing=missing)
        return ()
    try:
        with _program_fds(_PROBE) as (code_fd, bpf_fd), _maybe_lease(uid_base) as uid:
            r = subprocess.run(
                _bwrap_argv(path, Limits(cpu_s=10), uid, code_fd, bpf_fd),
                env=_BWRAP_ENV,
                pass_fds=[fd for fd in (code_fd, bpf_fd) if fd is not None],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=30,
                start_new_session=True,
            )
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        log.error("code sandbox unavailable: bwrap did not start", bwrap=path, error=str(exc))
        return ()
    if r.returncode != 0 or "sandbox-ok" not in r.stdout:
        log.error(
            "code sandbox unavailable: bwrap failed its probe",
            bwrap=path,
            rc=r.returncode,
            stderr=r.stderr.strip()[-500:],
        )
        return ()
    arch = platform.machine()
    layers = (
        path,
        "pid+mount+net+ipc+uts namespaces",
        f"uid {uid_base}..{uid_base + UID_POOL - 1} via setpriv" if root else f"userns uid {NOBODY}",
        "rlimits",
        f"seccomp ({arch})" if seccomp_filter() is not None else f"no seccomp table for {arch}",
    )
    log.info("code sandbox isolation", layers=list(layers))
    return layers


def isolation(bwrap: str | None = None, uid_base: int | None = None) -> tuple[str, ...]:
    """The OS isolation in force for `bwrap` (default: SY_SANDBOX_BWRAP), as a description of
    its layers; () when it is unavailable here. Probed once per binary by running a program."""
    if bwrap is None or uid_base is None:
        cfg = SandboxConfig.from_settings()
        bwrap = cfg.bwrap if bwrap is None else bwrap
        uid_base = cfg.uid_base if uid_base is None else uid_base
    return _probe(bwrap, uid_base)


# ------------------------------------------------------------------------------ running
def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _supervise(argv: list[str], limits: Limits, *, isolated: bool, **popen: Any) -> SandboxResult:
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


_BWRAP_ENV = {"PATH": "/usr/bin:/bin"}  # bwrap's own environment: nothing of the service's


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
            return await _supervise(argv, limits, isolated=True, env=_BWRAP_ENV, pass_fds=fds)
        finally:
            if uid is not None:
                await _drain_uid(uid)


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
        return await _supervise(
            argv, limits, isolated=False, cwd=tmp, env=env, preexec_fn=lambda: _limit_weak(limits)
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
    code: str, limits: Limits = Limits(), workdir: Path | None = None, *, config: SandboxConfig | None = None
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


# ------------------------------------------------------------------------------ the runner service
def _limits_from(raw: Any) -> Limits:
    """Limits from a request, each within _LIMIT_BOUNDS (ValueError otherwise)."""
    if not isinstance(raw, dict):
        raise ValueError("limits must be an object")
    values: dict[str, Any] = {}
    for f in fields(Limits):
        if f.name not in raw:
            continue
        v = raw[f.name]
        lo, hi = _LIMIT_BOUNDS[f.name]
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise ValueError(f"limits.{f.name} must be a number in [{lo}, {hi}]")
        values[f.name] = float(v) if f.name == "timeout_s" else int(v)
    unknown = set(raw) - {f.name for f in fields(Limits)}
    if unknown:
        raise ValueError(f"unknown limits {sorted(unknown)}")
    return Limits(**values)


def runner_app(config: SandboxConfig | None = None, max_parallel: int | None = None) -> Any:
    """The sandbox runner: POST /run {code, limits} -> SandboxResult; /readyz is 503 while there is
    no OS isolation (and the weak path is off), so a runner that cannot isolate never gets work."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    cfg = config or SandboxConfig.from_settings()
    cfg = SandboxConfig(bwrap=cfg.bwrap, allow_weak=cfg.allow_weak, uid_base=cfg.uid_base)  # never chain
    slots = asyncio.Semaphore(max_parallel or max(1, min(UID_POOL, os.cpu_count() or 1)))

    async def run(request: Request) -> JSONResponse:
        body = await request.body()
        if len(body) > MAX_CODE_BYTES + 4096:
            return JSONResponse({"error": "program too large"}, status_code=413)
        try:
            data = json.loads(body)
            code = data["code"]
            if not isinstance(code, str):
                raise ValueError("code must be a string")
            limits = _limits_from(data.get("limits", {}))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            return JSONResponse({"error": str(exc)[:500]}, status_code=400)
        async with slots:
            result = await run_python(code, limits, config=cfg)
        return JSONResponse(asdict(result))

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        layers = await asyncio.to_thread(_probe, cfg.bwrap, cfg.uid_base)
        if layers:
            return JSONResponse({"status": "ready", "isolation": list(layers)})
        if cfg.allow_weak:
            return JSONResponse({"status": "ready", "isolation": [], "weak": True})
        return JSONResponse({"status": "sandbox_unavailable"}, status_code=503)

    return Starlette(
        routes=[
            Route("/run", run, methods=["POST"]),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    """`python -m shared.rewards.sandbox`: serve the runner (no secrets needed or wanted here)."""
    import uvicorn

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--host", default=os.environ.get("SY_HEALTH_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=RUNNER_PORT)
    args = p.parse_args(argv)
    layers = isolation()
    if not layers:
        log.error("sandbox runner: no OS isolation; /readyz stays 503 and programs are refused")
    uvicorn.run(runner_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
