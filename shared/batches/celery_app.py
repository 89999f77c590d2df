"""The Celery app of batch jobs: the gateway enqueues by task name, services/batch runs the tasks.

Broker: Redis in production (SY_CELERY_BROKER), else kombu's SQLAlchemy transport on a SQLite
file under var/ (no server to run). What the embedded transport needs (RUNTIME-NOTES "Celery"):
its polling interval is a class attribute (passing it in broker_transport_options crashes), and
it loses a task whose worker is SIGKILLed. Neither broker is trusted with a job's progress:
that lives in object storage, and the batch service re-enqueues jobs whose worker went silent.
No result backend: nobody waits on a task's return value.
"""

from __future__ import annotations

from pathlib import Path

from celery import Celery

from shared.runtime.config import Settings

RUN_BATCH = "switchyard.batch.run"
QUEUE = "switchyard.batch"
SQLITE_POLL_S = 0.1  # kombu's default is 1 s per poll: ~1 s before a queued job starts


def broker_url(settings: Settings) -> str:
    if settings.celery_broker:
        return settings.celery_broker
    path = Path(settings.var_dir).resolve() / "celery" / "broker.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqla+sqlite:///{path}"


def make_celery(settings: Settings) -> Celery:
    url = broker_url(settings)
    options: dict[str, object] = {}
    if url.startswith("sqla+"):
        import kombu.transport.sqlalchemy as sqla

        sqla.Transport.polling_interval = SQLITE_POLL_S
    elif url.startswith(("redis://", "rediss://")):
        # Jobs are acked on receipt and recovered from storage, so this only bounds how long an
        # unacked message (worker killed while taking it) waits before redelivery.
        options["visibility_timeout"] = max(60, int(settings.batch_lease_s * 4))
    app = Celery("switchyard", broker=url)
    app.conf.update(
        task_default_queue=QUEUE,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options=options,
    )
    return app
