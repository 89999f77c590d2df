"""What a sandboxed program may use (Limits), where programs run (SandboxConfig) and what came of it."""

from __future__ import annotations

from dataclasses import dataclass

NOBODY = 65534
UID_POOL = 64  # uids leased from SY_SANDBOX_UID when the service is root
RUNNER_PORT = 9120
MAX_CODE_BYTES = 1 << 20  # what the runner accepts in one request


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
