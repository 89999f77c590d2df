"""The registry's error answers: OpenAI-shaped bodies, their schema, and the upload size guard."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

from shared.openai.errors import error_response as openai_error
from shared.openai.protocol import ErrorBody
from shared.runtime.admission import Refused
from shared.runtime.body_limit import BodyLimit

from .names import RegistryError


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for routes: these statuses answer an ErrorBody (documented in /openapi.json)."""
    return {s: {"model": ErrorBody} for s in statuses}


def error_response(
    status: int, message: str, code: str, param: str | None = None, retry_after: int | None = None
) -> JSONResponse:
    """A 429 always says when to retry (Retry-After)."""
    if status == 429 and retry_after is None:
        retry_after = 30
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return openai_error("registry", status, message, code, param, headers)


async def _refused(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RegistryError)
    return error_response(exc.status, exc.message, exc.code, exc.param)


async def _limited(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Refused)
    return error_response(exc.status, exc.message, exc.code, retry_after=exc.retry_after)


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 for a malformed request becomes a 400 naming the first bad field."""
    assert isinstance(exc, RequestValidationError)
    errs = exc.errors()
    first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
    param = ".".join(str(x) for x in first["loc"] if x not in ("body", "path", "query")) or None
    msg = "; ".join(
        f"{'.'.join(str(x) for x in e['loc'] if x not in ('body', 'path', 'query'))}: {e['msg']}"
        for e in errs[:5]
    )
    return error_response(400, msg, "invalid_request", param)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return error_response(
        exc.status_code, str(exc.detail), "not_found" if exc.status_code == 404 else "http_error"
    )


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RegistryError, _refused)
    app.add_exception_handler(Refused, _limited)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)


def upload_limit(app: ASGIApp, limit: int) -> BodyLimit:
    """413 while the upload is still arriving, so an oversize body is never fully received."""

    def too_big() -> RegistryError:  # a new one per upload: a raised exception carries its traceback
        return RegistryError(413, f"upload exceeds {limit} bytes", "too_large", "adapter_model")

    def refusal() -> JSONResponse:
        exc = too_big()
        return error_response(exc.status, exc.message, exc.code, exc.param)

    return BodyLimit(app, limit, refusal=refusal, overflow=too_big, methods={"POST"})
