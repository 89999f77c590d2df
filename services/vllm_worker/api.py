"""The worker's engine-profiling endpoints (vLLM's profiler API), beside /metrics and /readyz.

POST /v1/profile/start {"prefix": "..."} starts a torch profiler trace in the EngineCore;
POST /v1/profile/stop ends it and answers the trace files written. Both need the internal token:
a trace slows the engine and holds the data of every request in the window.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from shared.runtime.api import rest_app
from shared.runtime.auth import is_internal
from shared.runtime.config import Settings
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)
PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Profilable(Protocol):
    async def start_profile(self, prefix: str) -> None: ...

    async def stop_profile(self) -> None: ...


class ProfileStart(BaseModel):
    """The optional body of /v1/profile/start; the prefix defaults to sy-<unix time>."""

    prefix: str | None = None


class ProfileStarted(BaseModel):
    prefix: str
    dir: str


class ProfileWritten(BaseModel):
    prefix: str
    seconds: float
    files: list[str]


class ErrorDetail(BaseModel):
    message: str
    code: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Refused(Exception):
    """A profiling call refused: answered as {"error": {...}} with its status."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class Profiler:
    """One trace at a time: the open session's prefix and start time."""

    def __init__(self, settings: Settings, engine: Profilable) -> None:
        self.settings, self.engine = settings, engine
        self.prefix = ""
        self.started = 0.0

    async def start(self, read_body: Callable[[], Awaitable[dict[str, Any]]]) -> ProfileStarted:
        """Start a trace; the body (its prefix) is read once the session may start."""
        settings = self.settings
        if not settings.vllm_profiler:
            raise Refused(409, "engine profiling is off (SY_VLLM_PROFILER=false)", "profiler_disabled")
        if self.prefix:
            raise Refused(409, "a trace is already being captured", "profile_active")
        body = await read_body()
        prefix = str(body.get("prefix") or f"sy-{int(time.time())}")
        if not PREFIX.match(prefix):
            raise Refused(400, "prefix: 1-64 of A-Z a-z 0-9 _ . -", "invalid_request")
        settings.engine_trace_dir.mkdir(parents=True, exist_ok=True)
        await self.engine.start_profile(prefix)
        self.prefix, self.started = prefix, time.time()
        log.info("engine profile started", prefix=prefix)
        return ProfileStarted(prefix=prefix, dir=str(settings.engine_trace_dir))

    async def stop(self) -> ProfileWritten:
        if not self.prefix:
            raise Refused(409, "no trace is being captured", "profile_inactive")
        started, prefix = self.started, self.prefix
        try:
            await self.engine.stop_profile()  # returns once the EngineCore has written its trace
        finally:
            self.prefix, self.started = "", 0.0
        files = sorted(
            str(p)
            for p in self.settings.engine_trace_dir.rglob(f"{prefix}*")
            if p.is_file() and p.stat().st_mtime >= started - 1
        )
        log.info("engine profile written", prefix=prefix, files=len(files))
        return ProfileWritten(prefix=prefix, seconds=round(time.time() - started, 3), files=files)


ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 409)}


def profile_api(settings: Settings, engine: Profilable) -> FastAPI:
    profiler = Profiler(settings, engine)
    app = rest_app(title="Switchyard vLLM worker", version="0.1.0", description="Engine profiling")

    @app.exception_handler(Refused)
    async def _refused(_: Request, exc: Refused) -> JSONResponse:
        return JSONResponse({"error": {"message": exc.message, "code": exc.code}}, status_code=exc.status)

    def authorise(req: Request) -> None:
        if not is_internal(settings, req.headers.get("authorization")):
            raise Refused(401, "invalid internal token", "invalid_token")

    # The body is read by hand (not a pydantic parameter): an empty body is a default prefix,
    # and a bad prefix is this API's 400 rather than FastAPI's 422.
    body_schema = {"content": {"application/json": {"schema": ProfileStart.model_json_schema()}}}

    @app.post(
        "/v1/profile/start",
        response_model=ProfileStarted,
        responses=ERRORS,
        openapi_extra={"requestBody": body_schema},
    )
    async def start(req: Request) -> ProfileStarted:
        authorise(req)

        async def body() -> dict[str, Any]:
            return await req.json() if await req.body() else {}

        return await profiler.start(body)

    @app.post("/v1/profile/stop", response_model=ProfileWritten, responses=ERRORS)
    async def stop(req: Request) -> ProfileWritten:
        authorise(req)
        return await profiler.stop()

    return app
