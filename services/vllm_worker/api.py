"""The worker's engine-profiling endpoints (vLLM's profiler API), beside /metrics and /readyz.

POST /v1/profile/start {"prefix": "..."} starts a torch profiler trace in the EngineCore;
POST /v1/profile/stop ends it and answers the trace files written. Both need the internal token:
a trace slows the engine and holds the data of every request in the window.
"""

from __future__ import annotations

import re
import time
from typing import Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.runtime.auth import is_internal
from shared.runtime.config import Settings
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)
PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Profilable(Protocol):
    async def start_profile(self, prefix: str) -> None: ...

    async def stop_profile(self) -> None: ...


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": code}}, status_code=status)


def profile_api(settings: Settings, engine: Profilable) -> Starlette:
    session: dict[str, float | str] = {}

    def authorised(req: Request) -> bool:
        return is_internal(settings, req.headers.get("authorization"))

    async def start(req: Request) -> Response:
        if not authorised(req):
            return _error(401, "invalid internal token", "invalid_token")
        if not settings.vllm_profiler:
            return _error(409, "engine profiling is off (SY_VLLM_PROFILER=false)", "profiler_disabled")
        if session:
            return _error(409, "a trace is already being captured", "profile_active")
        body = await req.json() if await req.body() else {}
        prefix = str(body.get("prefix") or f"sy-{int(time.time())}")
        if not PREFIX.match(prefix):
            return _error(400, "prefix: 1-64 of A-Z a-z 0-9 _ . -", "invalid_request")
        settings.engine_trace_dir.mkdir(parents=True, exist_ok=True)
        await engine.start_profile(prefix)
        session.update(prefix=prefix, started=time.time())
        log.info("engine profile started", prefix=prefix)
        return JSONResponse({"prefix": prefix, "dir": str(settings.engine_trace_dir)})

    async def stop(req: Request) -> Response:
        if not authorised(req):
            return _error(401, "invalid internal token", "invalid_token")
        if not session:
            return _error(409, "no trace is being captured", "profile_inactive")
        started, prefix = float(session["started"]), str(session["prefix"])
        try:
            await engine.stop_profile()  # returns once the EngineCore has written its trace
        finally:
            session.clear()
        files = sorted(
            str(p)
            for p in settings.engine_trace_dir.rglob(f"{prefix}*")
            if p.is_file() and p.stat().st_mtime >= started - 1
        )
        log.info("engine profile written", prefix=prefix, files=len(files))
        return JSONResponse({"prefix": prefix, "seconds": round(time.time() - started, 3), "files": files})

    return Starlette(
        routes=[
            Route("/v1/profile/start", start, methods=["POST"]),
            Route("/v1/profile/stop", stop, methods=["POST"]),
        ]
    )
