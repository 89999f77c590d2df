"""Celery tasks of the batch service (`celery -A services.batch.tasks worker`).

A task runs one job to its end (services/batch/job.py) on its own event loop; the worker uses
the threads pool, so a worker process runs SY_BATCH_WORKER_CONCURRENCY jobs at once.
"""

from __future__ import annotations

import asyncio

from shared.adapters.refs import parse_ref
from shared.adapters.registry_client import RegistryClient, RegistryError
from shared.batches.celery_app import RUN_BATCH, make_celery
from shared.batches.store import BatchStore
from shared.runtime.bus import Producer
from shared.runtime.config import Settings, use_settings
from shared.runtime.envelope import Envelope
from shared.runtime.ingest_auth import ServiceSigner
from shared.runtime.production import HeldSecrets
from shared.runtime.service import settings_or_exit
from shared.runtime.stage import Emit, out_record
from shared.runtime.storage import open_store
from shared.runtime.telemetry import configure_logging, get_logger

from .job import BatchJob

settings = settings_or_exit(lambda s: HeldSecrets(token=s.internal_token.get_secret_value()), service="batch")
use_settings(settings)
configure_logging("batch-worker", settings.log_level, settings.log_format)
app = make_celery(settings)
log = get_logger(__name__)


async def run_job(settings: Settings, tenant: str, batch_id: str) -> str:
    base_models = {m for p in settings.pools for m in p.models}
    producer = Producer(settings, client_id=f"batch-worker-{settings.instance_id}")
    await producer.start()
    registry = RegistryClient(settings)
    requests_topic = settings.topic("requests")
    signer = ServiceSigner(settings)

    async def publish(envs: list[Envelope]) -> None:
        await producer.send_all([signer.sign(out_record(Emit(requests_topic, e))) for e in envs])

    async def known_model(tenant: str, model: str) -> bool:
        if model in base_models:
            return True
        try:
            parse_ref(model)
        except ValueError:
            return False
        try:
            return await registry.resolve(tenant, model) is not None
        except RegistryError as exc:
            if 400 <= exc.status < 500:
                return False
            raise  # registry down: the job fails now and is resumed by the sweep

    try:
        job = BatchJob(settings, BatchStore(open_store(settings)), publish, known_model)
        return await job.run(tenant, batch_id)
    finally:
        await producer.stop()
        await registry.aclose()


@app.task(name=RUN_BATCH, ignore_result=True)
def run_batch(tenant: str, batch_id: str) -> str:
    """Validate, send, collect and finalise one batch; a no-op if another worker holds it."""
    status = asyncio.run(run_job(settings, tenant, batch_id))
    log.info("batch task done", batch_id=batch_id, status=status)
    return status
