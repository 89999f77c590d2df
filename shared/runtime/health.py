"""Liveness, readiness and /metrics for every service process.

Liveness means the event loop answers; readiness means every registered check passes
(e.g. the consumer has joined its group, the engine is loaded). The launcher and the
compose/k8s probes use the same endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


class Health:
    def __init__(self, service: str) -> None:
        self.service = service
        self.started = time.time()
        self._checks: dict[str, Callable[[], bool]] = {}
        self.draining = False
        # False while the service is still being built: its checks are not all registered yet,
        # and an empty list of checks must not read as ready.
        self.built = False

    def add_check(self, name: str, check: Callable[[], bool]) -> None:
        self._checks[name] = check

    def readiness(self) -> tuple[bool, dict[str, bool]]:
        results = {}
        for name, check in self._checks.items():
            try:
                results[name] = bool(check())
            except Exception:  # noqa: BLE001 - a failing check means not ready
                results[name] = False
        results["built"] = self.built
        return (not self.draining and all(results.values())), results

    def routes(self) -> list[Route]:
        async def healthz(_: Request) -> Response:
            return JSONResponse(
                {"status": "ok", "service": self.service, "uptime_s": round(time.time() - self.started, 1)}
            )

        async def readyz(_: Request) -> Response:
            ready, checks = self.readiness()
            body = {"ready": ready, "service": self.service, "checks": checks, "draining": self.draining}
            return JSONResponse(body, status_code=200 if ready else 503)

        async def metrics(_: Request) -> Response:
            return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

        return [Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)]


class HttpServer:
    """uvicorn in the service's own event loop (no extra thread or process)."""

    def __init__(self, app: object, host: str, port: int, graceful_s: float | None = None) -> None:
        # graceful_s bounds the wait for open connections on stop (None: as long as they last).
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=int(graceful_s) + 1 if graceful_s is not None else None,
        )
        self._server = uvicorn.Server(config)
        # Signals belong to the service (shared.runtime.service): it drains first, then stops this server.
        # uvicorn would otherwise catch SIGTERM itself and close the listening socket at once.
        self._server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # re-raise the bind error
            await asyncio.sleep(0.01)

    @property
    def port(self) -> int:
        for server in self._server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return 0

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task


def health_app(health: Health) -> Starlette:
    return Starlette(routes=health.routes())
