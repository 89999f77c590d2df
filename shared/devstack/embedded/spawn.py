"""How the launcher starts an embedded server (Tansu, Triton, Milvus): one place for the flags
that make it safe to leave running beside the stack."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from shared.runtime.procs import die_with_parent


def spawn_server(
    argv: list[str],
    log_path: Path,
    env: dict[str, str],
    cwd: Path | None = None,
    setup: Callable[[], None] = die_with_parent,
) -> subprocess.Popen[bytes]:
    """Start `argv` with its output appended to `log_path` and no stdin, in a session of its own
    (stop_process ends its whole group), killed by the kernel if the launcher dies (`setup`,
    the preexec_fn: die_with_parent, or child_setup to pin cores too)."""
    with open(log_path, "ab") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen(
            argv,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=setup,
        )
