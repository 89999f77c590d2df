"""Production mode refuses to serve with a secret everyone knows (issue 33).

Production mode is SY_ENV=production, or SY_ENV unset with a production endpoint configured
(shared/runtime/config/ `Settings.production`). There, a process refuses to start while a secret it holds
is the embedded stack's default, too short, or (API keys) stored in plain text. Each process says
which secrets it holds (`HeldSecrets`), so the router, which holds none, is not asked for a token
it never uses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.runtime.config import ConfigError, Settings

HASH_PREFIX = "sha256:"
DEFAULT_API_KEY = "sk-switchyard-local"
DEFAULT_INTERNAL_TOKEN = "sy-internal-local"
MIN_SECRET_CHARS = 16


def hash_key(key: str) -> str:
    """The form of an API key to store in SY_API_KEYS: `sha256:<hex>`."""
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class HeldSecrets:
    """The secrets one process holds: API keys (gateway, registry), the internal token, ingest secrets."""

    tenant_keys: Mapping[str, str] | None = None  # SY_API_KEYS
    token: str | None = None  # SY_INTERNAL_TOKEN
    signing_secrets: Mapping[str, str] = field(default_factory=dict)  # SY_INGEST_SECRETS


def production_problems(held: HeldSecrets) -> list[str]:
    """Why these secrets are unsafe in production; empty when they are fine."""
    problems = []
    default_hash = hash_key(DEFAULT_API_KEY)
    for known in held.tenant_keys or {}:
        if known in (DEFAULT_API_KEY, default_hash):
            problems.append(f"SY_API_KEYS holds the default key {DEFAULT_API_KEY!r}")
        elif not known.startswith(HASH_PREFIX):
            problems.append(
                "SY_API_KEYS holds a plain-text key: store `sha256:<hex>` (`switchyard hash-key <key>` prints it)"
            )
    token = held.token
    if token is not None and (token == DEFAULT_INTERNAL_TOKEN or len(token) < MIN_SECRET_CHARS):
        problems.append(
            f"SY_INTERNAL_TOKEN is the default or shorter than {MIN_SECRET_CHARS} characters "
            "(e.g. `openssl rand -hex 32`)"
        )
    for tenant, secret in held.signing_secrets.items():
        if len(secret) < MIN_SECRET_CHARS:
            problems.append(
                f"SY_INGEST_SECRETS: {tenant!r}'s secret is shorter than {MIN_SECRET_CHARS} characters"
            )
    return sorted(set(problems))


def refuse_unsafe_production(settings: Settings, held: HeldSecrets) -> None:
    """ConfigError naming every unsafe secret, in production mode; nothing in dev mode."""
    if not settings.production:
        return
    problems = production_problems(held)
    if problems:
        why = "SY_ENV=production" if settings.env == "production" else "a production endpoint is set"
        raise ConfigError(
            f"production mode ({why}; SY_ENV=dev for a dev stack) refuses these settings:\n  "
            + "\n  ".join(problems)
        )
