"""One object-storage interface for every service: a local directory or S3/MinIO.

Objects are written whole or not at all (a reader never sees a half-written object under its
key), and each carries the sha256 of its bytes, computed while writing, so consumers can verify
what they download without a second pass over the data.

Modules: objects (keys, ObjectInfo, the ObjectStore interface), local (LocalStore), s3 (S3Store),
errors (which failures are outages of the store: DependencyUnavailable, waited out by the bus).
"""

from __future__ import annotations

from shared.runtime.config import Settings
from shared.runtime.storage.local import LocalStore
from shared.runtime.storage.objects import (
    CHUNK,
    MAX_KEY_BYTES,
    RESERVED,
    Data,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    validate_key,
    validate_prefix,
)
from shared.runtime.storage.s3 import SHA_META, S3Store

__all__ = [
    "CHUNK",
    "MAX_KEY_BYTES",
    "RESERVED",
    "SHA_META",
    "Data",
    "LocalStore",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "S3Store",
    "open_store",
    "validate_key",
    "validate_prefix",
]


def open_store(settings: Settings) -> ObjectStore:
    """S3 when SY_S3_ENDPOINT is set, else the local directory (embedded default)."""
    if settings.s3_endpoint:
        return S3Store(
            settings.s3_endpoint,
            settings.s3_bucket,
            access_key=settings.s3_access_key,
            secret_key=settings.s3_secret_key.get_secret_value() if settings.s3_secret_key else None,
            secure=settings.s3_secure,
            region=settings.s3_region,
        )
    return LocalStore(settings.object_dir)
