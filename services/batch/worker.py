"""The Celery worker that runs batch jobs, as a child process kept alive by the batch service."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from shared.batches.celery_app import QUEUE
from shared.runtime.config import Settings
from shared.runtime.periodic import every
from shared.runtime.procs import die_with_parent, stop_process
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


def worker_pid_file(settings: Settings) -> str:
    return str(settings.var_dir / "run" / f"batch-worker-{settings.instance_id}.pid")


class CeleryWorker:
    """Keeps one Celery worker process running; its pid is written for operators (and tests)."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "services.batch.tasks",
            "worker",
            "--pool=threads",
            f"--concurrency={self.s.batch_worker_concurrency}",
            "-Q",
            QUEUE,
            "-n",
            f"batch-{self.s.instance_id}-{self.starts}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--loglevel={self.s.log_level}",
        ]

    def start(self) -> None:
        self.starts += 1
        self.proc = subprocess.Popen(
            self.argv(), stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent
        )
        path = worker_pid_file(self.s)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(str(self.proc.pid))
        log.info("celery worker started", pid=self.proc.pid, starts=self.starts)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def restart_if_dead(self) -> None:
        if not self.alive():
            code = self.proc.returncode if self.proc else None
            log.warning("celery worker exited; restarting", code=code)
            if self.proc is not None:
                await asyncio.to_thread(stop_process, self.proc, 1.0)  # clears its group
            self.start()

    async def supervise(self, stop: asyncio.Event) -> None:
        """Start the worker, restart it within half a second of its death, stop it on `stop`."""
        self.start()
        try:
            await every(0.5, self.restart_if_dead, stop, name="celery worker", at_once=True, fatal=True)
        finally:
            if self.proc is not None:
                # Jobs resume from storage, so a bounded stop is enough.
                await asyncio.to_thread(stop_process, self.proc, 5.0)
