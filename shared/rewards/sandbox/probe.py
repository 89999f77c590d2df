"""Is OS isolation available here? Found out once per bwrap binary by running a program through it."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache

import structlog

from shared.rewards.sandbox.bwrap import _BWRAP_ENV, _bwrap_argv, _maybe_lease, _program_fds, _resolve
from shared.rewards.sandbox.limits import NOBODY, UID_POOL, Limits, SandboxConfig
from shared.rewards.sandbox.seccomp import seccomp_filter

log = structlog.get_logger(__name__)

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
