"""Process wiring shared by the stage services: settings, logging, tracing, health, signals.

A service's main.py builds its consumers and calls `run_service`. SIGTERM/SIGINT: readiness
turns false, the `on_drain` hooks run while everything still works (the gateway waits there for
the replies its open requests are owed, which its background reply reader delivers), then the
consumers stop (they drain in-flight records and commit), the background tasks are told to stop,
and the producer and the HTTP server close. Each step is bounded by SY_DRAIN_TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from starlette.routing import Mount
from starlette.types import ASGIApp

from shared.runtime.admin import AdminGuard
from shared.runtime.bus import Producer
from shared.runtime.config import ConfigError, Settings, load_settings, use_settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.health import Health, HttpServer, health_app
from shared.runtime.production import HeldSecrets, refuse_unsafe_production
from shared.runtime.telemetry import (
    configure_logging,
    configure_tracing,
    get_logger,
    register_gpu_metrics,
    shutdown_tracing,
)

log = get_logger(__name__)


@dataclass
class Service:
    """What a service main hands to run_service."""

    consumers: Sequence[StageConsumer]
    background: Sequence[Callable[[asyncio.Event], Awaitable[None]]] = field(default_factory=list)
    on_stop: Sequence[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Run first on SIGTERM, before consumers and background tasks are told to stop; each is cut
    # off after SY_DRAIN_TIMEOUT_S.
    on_drain: Sequence[Callable[[], Awaitable[None]]] = field(default_factory=list)
    app: ASGIApp | None = None  # REST services: served on the same port, beside the health routes


Builder = Callable[[Settings, Producer, Health], Awaitable[Service]]


SecretsOf = Callable[[Settings], HeldSecrets]


def settings_or_exit(secrets: SecretsOf | None = None, service: str | None = None) -> Settings:
    """The settings (`service`: that service's sections only), or exit 2 with the reason.
    `secrets`: what a serving process holds, which production mode refuses when a default, too
    short or in plain text (shared/runtime/production.py)."""
    try:
        settings = load_settings(service)
        if secrets is not None:
            refuse_unsafe_production(settings, secrets(settings))
        return settings
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None


async def serve(name: str, settings: Settings, build: Builder) -> None:
    health = Health(name)
    term = asyncio.Event()  # the signal
    stop = asyncio.Event()  # what background tasks watch: set once the drain hooks are done
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, term.set)

    root = health_app(health)
    http = HttpServer(
        AdminGuard(root, settings),
        settings.health_host,
        settings.health_port_for(name),
        graceful_s=settings.drain_timeout_s,
    )
    await http.start()  # liveness answers while the service builds (an engine may take a while)
    producer = Producer(settings, client_id=f"{name}-{settings.instance_id}")
    await producer.start()
    svc = await build(settings, producer, health)
    for c in svc.consumers:
        health.add_check(f"consumer:{c.stage}", c.assigned)
        health.add_check(f"flowing:{c.stage}", c.flowing)  # ready means flowing (DESIGN §3)
    health.add_check("producer", producer.deliverable)
    if svc.app is not None:
        root.router.routes.append(Mount("/", app=svc.app))
    health.built = True
    log.info("service starting", port=http.port, topics=[t for c in svc.consumers for t in c.topics])

    tasks = [asyncio.create_task(c.run(), name=f"consume:{c.stage}") for c in svc.consumers]
    tasks += [asyncio.create_task(b(stop), name="background") for b in svc.background]
    stopper = asyncio.create_task(term.wait())
    done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    failed = [t for t in done if t is not stopper and t.exception() is not None]
    for t in failed:
        log.error("service task failed", task=t.get_name(), error=repr(t.exception()))

    log.info("draining")
    health.draining = True
    t_drain = loop.time()
    for hook in svc.on_drain:
        try:
            await asyncio.wait_for(hook(), timeout=settings.drain_timeout_s)
        except TimeoutError:
            log.warning("drain hook timed out", hook=getattr(hook, "__name__", str(hook)))
    stop.set()
    for c in svc.consumers:
        await c.stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    for hook in svc.on_stop:
        await hook()
    await producer.stop()
    await http.stop()
    shutdown_tracing()
    log.info("stopped", drain_s=round(loop.time() - t_drain, 3))
    if failed:
        raise SystemExit(1)


def run_service(name: str, build: Builder, secrets: SecretsOf) -> None:
    """Entry point of a stage service process; `secrets`: the ones it holds, which production
    mode checks (shared/runtime/production.py)."""
    settings = settings_or_exit(secrets, service=name)
    use_settings(settings)
    configure_logging(name, settings.log_level, settings.log_format, settings.log_redact_prompts)
    configure_tracing(name, settings.trace_file, settings.trace_sample_ratio)
    register_gpu_metrics()
    asyncio.run(serve(name, settings, build))
