"""The sandbox runner service (`python -m shared.rewards.sandbox`): POST /run, /healthz, /readyz."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from dataclasses import asdict, fields
from typing import Any

import structlog

from shared.rewards.sandbox.limits import (
    _LIMIT_BOUNDS,
    MAX_CODE_BYTES,
    RUNNER_PORT,
    UID_POOL,
    Limits,
    SandboxConfig,
)
from shared.rewards.sandbox.probe import _probe, isolation
from shared.rewards.sandbox.runner import run_python

log = structlog.get_logger(__name__)


def _limits_from(raw: Any) -> Limits:
    """Limits from a request, each within _LIMIT_BOUNDS (ValueError otherwise)."""
    if not isinstance(raw, dict):
        raise ValueError("limits must be an object")
    values: dict[str, Any] = {}
    for f in fields(Limits):
        if f.name not in raw:
            continue
        v = raw[f.name]
        lo, hi = _LIMIT_BOUNDS[f.name]
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise ValueError(f"limits.{f.name} must be a number in [{lo}, {hi}]")
        values[f.name] = float(v) if f.name == "timeout_s" else int(v)
    unknown = set(raw) - {f.name for f in fields(Limits)}
    if unknown:
        raise ValueError(f"unknown limits {sorted(unknown)}")
    return Limits(**values)


def runner_app(config: SandboxConfig | None = None, max_parallel: int | None = None) -> Any:
    """The sandbox runner: POST /run {code, limits} -> SandboxResult; /readyz is 503 while there is
    no OS isolation (and the weak path is off), so a runner that cannot isolate never gets work."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    cfg = config or SandboxConfig.from_settings()
    cfg = SandboxConfig(bwrap=cfg.bwrap, allow_weak=cfg.allow_weak, uid_base=cfg.uid_base)  # never chain
    slots = asyncio.Semaphore(max_parallel or max(1, min(UID_POOL, os.cpu_count() or 1)))

    async def run(request: Request) -> JSONResponse:
        body = await request.body()
        if len(body) > MAX_CODE_BYTES + 4096:
            return JSONResponse({"error": "program too large"}, status_code=413)
        try:
            data = json.loads(body)
            code = data["code"]
            if not isinstance(code, str):
                raise ValueError("code must be a string")
            limits = _limits_from(data.get("limits", {}))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            return JSONResponse({"error": str(exc)[:500]}, status_code=400)
        async with slots:
            result = await run_python(code, limits, config=cfg)
        return JSONResponse(asdict(result))

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        layers = await asyncio.to_thread(_probe, cfg.bwrap, cfg.uid_base)
        if layers:
            return JSONResponse({"status": "ready", "isolation": list(layers)})
        if cfg.allow_weak:
            return JSONResponse({"status": "ready", "isolation": [], "weak": True})
        return JSONResponse({"status": "sandbox_unavailable"}, status_code=503)

    return Starlette(
        routes=[
            Route("/run", run, methods=["POST"]),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    """`python -m shared.rewards.sandbox`: serve the runner (no secrets needed or wanted here)."""
    import uvicorn

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--host", default=os.environ.get("SY_HEALTH_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=RUNNER_PORT)
    args = p.parse_args(argv)
    layers = isolation()
    if not layers:
        log.error("sandbox runner: no OS isolation; /readyz stays 503 and programs are refused")
    uvicorn.run(runner_app(), host=args.host, port=args.port, log_level="warning")
