"""Which errors of an object store are outages: waited out by the bus, never dead-lettered."""

from __future__ import annotations

import errno
import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from shared.runtime.envelope import DependencyUnavailable
from shared.runtime.outages import FILESYSTEM_ERRNOS, NETWORK_ERRNOS, OBJECT_STORE, caused_by, network_down

F = TypeVar("F", bound=Callable[..., Any])


# Outages of the store (issue 32): waited out by the bus, never dead-lettered. A missing object
# stays ObjectNotFound / None, and a refused request (bad key, access denied) keeps its error.
# A local directory may be a network mount: besides the network errnos, a full or read-only
# file system is the store being unavailable for writes, not the record's fault.
_LOCAL_OUTAGE_ERRNOS = NETWORK_ERRNOS | FILESYSTEM_ERRNOS | {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
SOURCE_NOTE = "(while reading the data given to put: not an object store outage)"


def _from_source(exc: BaseException) -> bool:
    return SOURCE_NOTE in getattr(exc, "__notes__", ())


def local_outage(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _LOCAL_OUTAGE_ERRNOS and not _from_source(exc)


_S3_DOWN_STATUS = frozenset({500, 502, 503, 504})
_S3_DOWN_CODES = frozenset(
    {"ServiceUnavailable", "SlowDown", "InternalError", "RequestTimeout", "XMinioServerNotInitialized"}
)


def s3_outage(exc: BaseException) -> bool:
    """Connection refused/reset, timeouts, urllib3's retries used up (MaxRetryError, also after
    5xx answers), a body cut off (ProtocolError), a 5xx from the server or a proxy before it."""
    import urllib3.exceptions as u3
    from minio.error import InvalidResponseError, S3Error, ServerError

    if _from_source(exc):
        return False

    def one(e: BaseException) -> bool:
        if isinstance(e, u3.MaxRetryError | u3.ProtocolError | u3.TimeoutError | u3.NewConnectionError):
            return True
        if isinstance(e, ServerError):
            return e.status_code in _S3_DOWN_STATUS
        if isinstance(e, InvalidResponseError):  # a non-XML answer, e.g. a proxy's 502 page
            return getattr(e, "_code", 0) in _S3_DOWN_STATUS
        if isinstance(e, S3Error):
            status = getattr(e.response, "status", 0)
            return e.code in _S3_DOWN_CODES or status in _S3_DOWN_STATUS
        return network_down(e)

    return caused_by(exc, one)


def _unavailable(exc: BaseException, what: str) -> DependencyUnavailable:
    return DependencyUnavailable(OBJECT_STORE, f"{what}: {type(exc).__name__}: {exc}"[:500])


def outages(is_outage: Callable[[BaseException], bool]) -> Callable[[F], F]:
    """Decorate a store method (a coroutine or an async generator, its first argument the key or
    prefix): errors `is_outage` recognises leave as DependencyUnavailable, others unchanged."""

    def wrap(exc: Exception, fn: Callable[..., Any], args: tuple[Any, ...]) -> Exception:
        if isinstance(exc, DependencyUnavailable) or not is_outage(exc):
            return exc
        return _unavailable(exc, f"{fn.__name__} {args[0] if args else ''!r}")

    def deco(fn: F) -> F:
        if inspect.isasyncgenfunction(fn):

            @functools.wraps(fn)
            async def gen(self: Any, *args: Any, **kw: Any) -> AsyncIterator[bytes]:
                agen = fn(self, *args, **kw)
                try:
                    async for block in agen:
                        yield block
                except Exception as exc:
                    out = wrap(exc, fn, args)
                    if out is exc:
                        raise
                    raise out from exc
                finally:
                    await agen.aclose()

            return gen  # type: ignore[return-value]

        @functools.wraps(fn)
        async def call(self: Any, *args: Any, **kw: Any) -> Any:
            try:
                return await fn(self, *args, **kw)
            except Exception as exc:
                out = wrap(exc, fn, args)
                if out is exc:
                    raise
                raise out from exc

        return call  # type: ignore[return-value]

    return deco
