"""Which failures mean that a dependency is down, not that the record is bad (DESIGN §3, issue 32).

A stage turns these into `shared.runtime.envelope.DependencyUnavailable` (`raise ... from exc`): the bus
waits the outage out with backoff and never counts it as an attempt nor dead-letters for it.
Everything else keeps its own error: a missing object, an unknown adapter or model, a refused
request are final (or retried, then dead-lettered) as before. Library-specific checks (S3, httpx,
Milvus) live beside their clients; the gRPC and OS ones shared by several stages live here.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator

# `DependencyUnavailable.dependency` values (one per dependency in DESIGN §3).
OBJECT_STORE = "object_store"
MILVUS = "milvus"
TRITON = "triton"
REGISTRY = "registry"

GRPC_UNAVAILABLE = "StatusCode.UNAVAILABLE"
GRPC_DEADLINE_EXCEEDED = "StatusCode.DEADLINE_EXCEEDED"

# A network peer (or the server of a network file system behind a local path) away right now.
NETWORK_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EHOSTDOWN,
        errno.EHOSTUNREACH,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.ENETRESET,
        errno.ENOTCONN,
        errno.EPIPE,
    }
)
# A file system that fails calls rather than refusing them: local paths only (a client of a
# network service reading a local file must not take that file's EIO for the service's outage).
FILESYSTEM_ERRNOS = frozenset(
    {
        errno.ESTALE,  # NFS handle gone: the server restarted or the export was remounted
        errno.EIO,  # the device or the network file system failed the call
    }
)


def chain(exc: BaseException) -> Iterator[BaseException]:
    """exc, then what caused it (`__cause__`, else an unsuppressed `__context__`), each once (pymilvus raises
    `e from e`, so the chain can loop)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        if cur.__cause__ is not None:
            cur = cur.__cause__
        else:
            cur = None if cur.__suppress_context__ else cur.__context__


def caused_by(exc: BaseException, test: Callable[[BaseException], bool]) -> bool:
    return any(test(e) for e in chain(exc))


def grpc_code(exc: BaseException) -> str | None:
    """'StatusCode.X' of a grpc.RpcError (`code()`) or a tritonclient InferenceServerException
    (`status()`); None for anything else."""
    for attr in ("code", "status"):
        fn = getattr(exc, attr, None)
        if callable(fn):
            try:
                value = fn()
            except Exception:  # noqa: BLE001 - not the accessor we mean
                continue
            if value is not None and str(value).startswith("StatusCode."):
                return str(value)
    return None


def network_down(exc: BaseException) -> bool:
    """Connection refused/reset/timed out, host or network unreachable, a stale NFS handle."""
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    return isinstance(exc, OSError) and exc.errno in NETWORK_ERRNOS


def triton_down(exc: BaseException) -> bool:
    """Triton cannot be reached or is not serving (gRPC UNAVAILABLE: connection refused, server
    shutting down, model being (re)loaded).

    DEADLINE_EXCEEDED is NOT an outage here: it bounds one request's generation or scoring
    (SY_TRITON_TIMEOUT_S, the reward model's `timeout_s`), and a request that always takes longer
    can never succeed, so it must still be retried a few times and then dead-lettered."""
    return caused_by(exc, lambda e: grpc_code(e) == GRPC_UNAVAILABLE or network_down(e))
