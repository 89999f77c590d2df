"""The gateway's errors: `ApiError` raised anywhere in a request, one OpenAI-shaped body out."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.openai.errors import error_response
from shared.runtime.admission import Refused
from shared.runtime.envelope import Envelope, Rejected


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers


# Room left in a record for its key and headers (trace context, content type, job).
_RECORD_OVERHEAD = 4096


def refuse_oversized(env: Envelope, max_record_bytes: int) -> None:
    """413 before anything is derived from a request the pipeline would refuse: a record over
    SY_MAX_RECORD_BYTES is dead-lettered by the first stage that reads it (issue 32)."""
    size = env.ByteSize()
    if size + _RECORD_OVERHEAD > max_record_bytes:
        raise ApiError(
            413,
            f"request is {size} bytes once encoded; the pipeline takes at most "
            f"{max_record_bytes - _RECORD_OVERHEAD} (SY_MAX_RECORD_BYTES): send images and audio "
            "by object-store URI, or shorten the prompt",
            "request_too_large",
        )


def _error(
    status: int, message: str, code: str, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return error_response("gateway", status, message, code, param, headers)


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _error(exc.status, exc.message, exc.code, exc.param, exc.headers)


async def _refused(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Refused)
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return _error(exc.status, exc.message, exc.code, headers=headers)


async def _rejected(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Rejected)
    return _error(exc.http_status, exc.reason, exc.code)


def _located(e: Any) -> str:
    """`field: reason`; a check across fields (a model validator) has no field: its reason names them."""
    where = ".".join(str(x) for x in e["loc"] if x != "body")
    return f"{where}: {e['msg']}" if where else str(e["msg"])


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errs = exc.errors()
    first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
    param = ".".join(str(x) for x in first["loc"] if x != "body") or None
    msg = "; ".join(_located(e) for e in errs[:5])
    return _error(400, msg, "invalid_request", param)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return _error(exc.status_code, str(exc.detail), "not_found" if exc.status_code == 404 else "http_error")


def add_error_handlers(app: FastAPI) -> None:
    """Every error the gateway answers has OpenAI's shape (and is counted in sy_errors_total)."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(Refused, _refused)
    app.add_exception_handler(Rejected, _rejected)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
