"""The Security section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, SecretStr

from shared.runtime.config.base import Section


class SecuritySettings(Section):
    """Tenants' API keys, the Kafka trust boundary and secrets (issue 33, docs/security.md)."""

    title: ClassVar[str] = "Security"

    api_keys: dict[str, str] = Field(
        default_factory=lambda: {"sk-switchyard-local": "local"},
        description='JSON map of API key to tenant, e.g. {"sk-a": "acme"} (keys are never logged)',
    )
    env: Literal["dev", "production"] | None = Field(
        default=None,
        description="dev or production. Unset: production when SY_KAFKA_BOOTSTRAP, SY_MILVUS_URI or SY_S3_ENDPOINT "
        "is set (`switchyard up` sets dev for the embedded stack). Production refuses default secrets and "
        "plain-text API keys, and requires signed Kafka ingest",
    )
    admin_auth: Literal["auto", "off", "required"] = Field(
        default="auto",
        description="required: /metrics, /docs, /openapi.json, cache stats and floors and profiling need "
        "'Authorization: Bearer <SY_INTERNAL_TOKEN>' (else 401); off: open; auto: required in production",
    )
    kafka_ingest_auth: Literal["auto", "off", "required"] = Field(
        default="auto",
        description="required: a record on sy.requests must carry a valid sy-signature (else DLQ, unauthenticated); "
        "off: trusted, with a warning at start-up; auto: required in production, off in dev",
    )
    ingest_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="JSON map tenant -> HMAC secret its Kafka producers sign sy.requests records with (docs/security.md)",
    )
    ingest_max_skew_s: float = Field(
        default=300.0,
        gt=0,
        description="A signed record's timestamp may be this far from now (bounds replays)",
    )
    internal_token: SecretStr = Field(
        default=SecretStr("sy-internal-local"),
        description="Token services use to call the registry on a tenant's behalf (set it in production)",
    )
