"""batch: the Celery worker that runs batch jobs, the collector of their answers, and the sweep.

- Celery worker: a child process (`celery -A services.batch.tasks worker`), restarted when it
  dies (services/batch/worker.py).
- Collector: consumer group on sy.responses; stores batch answers (services/batch/collect.py).
- Sweep: starts every job found in storage that no live worker holds (a lost or never
  delivered task, a killed worker), so no broker is trusted with a job's life (services/batch/sweep.py).
"""

from __future__ import annotations

from shared.batches.store import BatchStore
from shared.runtime.bus import Producer, off_path_wait_ms
from shared.runtime.config import Settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import envelope_handler
from shared.runtime.storage import open_store

from .collect import Collector
from .sweep import Sweep
from .worker import CeleryWorker


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
