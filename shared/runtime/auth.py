"""Bearer tokens: tenants' API keys and the internal token services use with each other.

Compared in constant time (hmac.compare_digest) so a key can't be guessed byte by byte from
response timings. One place, so every service checks them the same way.

SY_API_KEYS may hold a key's SHA-256 (`sha256:<hex>`, printed by `switchyard hash-key`) instead
of the key: a leaked config or Secret then gives nobody a working key. Production mode accepts
only hashed keys (shared/runtime/production.py).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from shared.runtime.config import Settings
from shared.runtime.production import HASH_PREFIX, hash_key

__all__ = ["HASH_PREFIX", "bearer", "hash_key", "is_internal", "tenant_for_key"]


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None when there is none."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization[7:].strip()


def tenant_for_key(api_keys: Mapping[str, str], key: str) -> str | None:
    """The tenant an API key belongs to; None for an unknown key."""
    found = None
    hashed = hash_key(key).encode()
    for known, tenant in api_keys.items():
        given = hashed if known.startswith(HASH_PREFIX) else key.encode()
        if hmac.compare_digest(known.encode(), given):
            found = tenant
    return found


def is_internal(settings: Settings, authorization: str | None) -> bool:
    """True when the header carries the internal token (SY_INTERNAL_TOKEN)."""
    token = bearer(authorization)
    return token is not None and hmac.compare_digest(
        token.encode(), settings.internal_token.get_secret_value().encode()
    )
