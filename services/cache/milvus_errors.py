"""Milvus being away, told apart from a wrong request (issue 32): `milvus_down`, and `outages`,
which turns the first into DependencyUnavailable("milvus") around every CacheStore call."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pymilvus.exceptions import ConnectError, MilvusException, MilvusUnavailableException

from shared.runtime.envelope import DependencyUnavailable
from shared.runtime.outages import (
    GRPC_DEADLINE_EXCEEDED,
    GRPC_UNAVAILABLE,
    MILVUS,
    caused_by,
    grpc_code,
    network_down,
)

F = TypeVar("F", bound=Callable[..., Any])

# MilvusException codes of a server that is away: 2 is both pymilvus' CONNECT_FAILED ("Fail
# connecting to server", also raised when a lost connection cannot be re-established) and the
# server's ServiceUnavailable. pymilvus' retry loop re-raises gRPC errors as MilvusException with
# the grpc.StatusCode as the code once its retries or timeout are spent.
_DOWN_CODES = frozenset({2, GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED})


def milvus_down(exc: BaseException) -> bool:
    """Milvus cannot be reached or is not serving now (not: the request is wrong)."""

    def one(e: BaseException) -> bool:
        if isinstance(e, ConnectError | MilvusUnavailableException):
            return True
        if isinstance(e, MilvusException):
            code = e.code if isinstance(e.code, int) else str(e.code)
            # The server marks transient states (not ready, unavailable, rate limited) retriable.
            return code in _DOWN_CODES or (e.retriable and not e.is_input_error)
        return grpc_code(e) in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED) or network_down(e)

    return caused_by(exc, one)


def outages(fn: F) -> F:
    """Milvus being down leaves a CacheStore call as DependencyUnavailable("milvus")."""

    @functools.wraps(fn)
    def call(*args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except Exception as exc:
            if milvus_down(exc):
                raise DependencyUnavailable(MILVUS, f"{fn.__name__}: {exc}"[:500]) from exc
            raise

    return call  # type: ignore[return-value]
