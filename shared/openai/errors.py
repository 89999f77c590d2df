"""OpenAI-shaped error bodies, one mapping of HTTP status to error type for every REST service."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from shared.runtime.telemetry import ERRORS

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "server_error")


def error_body(
    message: str, type_: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    service: str,
    status: int,
    message: str,
    code: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The error as OpenAI's clients expect it, counted in sy_errors_total."""
    ERRORS.labels(service, code).inc()
    return JSONResponse(error_body(message, error_type(status), code, param), status, headers=headers)
