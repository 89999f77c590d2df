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

The modules: limits (Limits, SandboxConfig, SandboxResult), seccomp (the filter), bwrap (the
command, memfds, uid leases), probe (isolation), process (supervising one program), weak (the
weak path), runner (run_python), server (the runner service).
"""

from shared.rewards.sandbox.limits import (
    MAX_CODE_BYTES,
    NOBODY,
    RUNNER_PORT,
    UID_POOL,
    Limits,
    SandboxConfig,
    SandboxResult,
)
from shared.rewards.sandbox.probe import isolation
from shared.rewards.sandbox.runner import run_python
from shared.rewards.sandbox.seccomp import seccomp_filter
from shared.rewards.sandbox.server import main, runner_app

__all__ = [
    "MAX_CODE_BYTES",
    "NOBODY",
    "RUNNER_PORT",
    "UID_POOL",
    "Limits",
    "SandboxConfig",
    "SandboxResult",
    "isolation",
    "main",
    "run_python",
    "runner_app",
    "seccomp_filter",
]
