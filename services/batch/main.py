"""batch: the Celery worker that runs batch jobs, the collector of their answers, and the sweep.

- Celery worker: a child process (`celery -A services.batch.tasks worker`), restarted when it dies.
- Collector: consumer group on sy.responses; stores batch answers (services/batch/collect.py).
- Sweep: starts every job found in storage that no live worker holds (a lost or never
  delivered task, a killed worker), so no broker is trusted with a job's life.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from shared.batches.celery_app import QUEUE, RUN_BATCH, make_celery
from shared.batches.store import BatchStore
from shared.runtime.bus import Producer, off_path_wait_ms
from shared.runtime.config import Settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.health import Health
from shared.runtime.procs import die_with_parent, stop_process
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import envelope_handler
from shared.runtime.storage import open_store
from shared.runtime.telemetry import get_logger

from .collect import Collector

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

    async def supervise(self, stop: asyncio.Event) -> None:
        self.start()
        try:
            while not stop.is_set():
                if not self.alive():
                    code = self.proc.returncode if self.proc else None
                    log.warning("celery worker exited; restarting", code=code)
                    if self.proc is not None:
                        await asyncio.to_thread(stop_process, self.proc, 1.0)  # clears its group
                    self.start()
                try:
                    await asyncio.wait_for(stop.wait(), timeout=0.5)
                except TimeoutError:
                    pass
        finally:
            if self.proc is not None:
                # Jobs resume from storage, so a bounded stop is enough.
                await asyncio.to_thread(stop_process, self.proc, 5.0)


class Sweep:
    """Enqueue jobs that are not final and whose lease is missing or expired."""

    def __init__(self, settings: Settings, store: BatchStore) -> None:
        self.s, self.store = settings, store
        self.celery = make_celery(settings)
        self._sent: dict[str, float] = {}
        self.enqueued = 0

    async def once(self) -> None:
        now = time.time()
        for tenant, batch_id in await self.store.active():
            lease = await self.store.lease(batch_id)
            if lease is not None and lease.get("until", 0) > now:
                continue
            # Give a task already queued (by the gateway, or by us) time to start first.
            if now - self._sent.get(batch_id, 0) < self.s.batch_lease_s:
                continue
            batch = await self.store.get_batch(tenant, batch_id)
            if batch is None or (lease is None and now - batch.created_at < self.s.batch_lease_s):
                continue
            self._sent[batch_id] = now
            self.enqueued += 1
            log.info("batch job (re)enqueued by the sweep", batch_id=batch_id, had_lease=lease is not None)
            await asyncio.to_thread(self.celery.send_task, RUN_BATCH, args=[tenant, batch_id], queue=QUEUE)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.once()
            except Exception as exc:  # noqa: BLE001 - storage or broker hiccup: next round
                log.warning("batch sweep failed", error=str(exc))
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.s.batch_sweep_interval_s)
            except TimeoutError:
                pass


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    store = BatchStore(open_store(settings))
    collector = Collector(store, settings.instance_id)
    worker = CeleryWorker(settings)
    sweep = Sweep(settings, store)
    consumer = StageConsumer(
        stage="batch_collect",
        topics=[settings.topic("responses")],
        group_id=f"{settings.topic_prefix}batch-collect",
        handler=envelope_handler("batch_collect", collector.handle, validate_input=False, jobs=("batch",)),
        producer=producer,
        settings=settings,
        dlq_topic=settings.topic("dlq"),
        max_in_flight=2048,  # answers wait for a group commit to storage, not for CPU
        fetch_max_wait_ms=off_path_wait_ms(settings),
    )
    health.add_check("celery_worker", worker.alive)
    return Service([consumer], background=[collector.run, worker.supervise, sweep.run])


def main() -> None:
    run_service("batch", build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
