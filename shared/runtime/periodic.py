"""Run a function every so often until a stop event, surviving its failures."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


async def every(
    interval_s: float,
    fn: Callable[[], Awaitable[object] | object],
    stop: asyncio.Event,
    *,
    name: str = "periodic",
    at_once: bool = False,
    fatal: bool = False,
) -> None:
    """Call `fn` (sync or async) every `interval_s` until `stop` is set.

    The first call comes after one interval (`at_once`: at once). An exception is logged and the
    next call comes on schedule: a background chore (a sweep, a reload) that fails once must not
    take its service down. `fatal`: an exception ends the task instead, and with it the service,
    which its supervisor restarts (for work the service is useless without, such as the router's
    fail-over or the batch service's Celery worker). Stopping interrupts the wait, never a call.
    """
    first = True
    while not stop.is_set():
        if not (first and at_once):
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
                return
            except TimeoutError:
                pass
        first = False
        try:
            result = fn()
            if asyncio.iscoroutine(result):
                await result
        except Exception as exc:  # noqa: BLE001 - see docstring
            if fatal:
                raise
            log.warning("periodic task failed", task=name, error=repr(exc), exc_info=True)
