"""The Kafka section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator

from shared.runtime.config.base import Section


class KafkaSettings(Section):
    """The broker connection, topics, and the clients' fetch, group and commit timing."""

    title: ClassVar[str] = "Kafka"

    kafka_bootstrap: str | None = Field(
        default=None, description="Kafka bootstrap servers; unset = the launcher starts the embedded broker"
    )
    kafka_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Port of the embedded broker (unset: 9092 when free, else a free port)",
    )
    kafka_embedded: bool = Field(
        default=False,
        description="The broker is the embedded Tansu (the launcher sets it): turns on the workarounds for a "
        "broker that restarts empty (shared/runtime/embedded_broker.py)",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="Kafka security protocol"
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="SASL mechanism (with SASL_* protocols)"
    )
    kafka_sasl_username: str | None = Field(default=None, description="SASL user name")
    kafka_sasl_password: SecretStr | None = Field(default=None, description="SASL password (never logged)")
    topic_prefix: str = Field(
        default="sy.", pattern=r"^[A-Za-z0-9._-]*$", description="Prefix of every topic and group"
    )
    topic_partitions: int = Field(
        default=4,
        ge=1,
        le=1024,
        description="Partitions of keyed topics (`switchyard up` gives the embedded broker's topics 1 unless this is set)",
    )
    kafka_fetch_max_wait_ms: int = Field(
        default=5, ge=1, le=5000, description="Broker fetch wait; sets the per-hop latency floor"
    )
    kafka_idle_after_s: float = Field(
        default=30.0,
        ge=0,
        description="A reader without records this long fetches with SY_KAFKA_IDLE_FETCH_WAIT_MS (0: never)",
    )
    kafka_idle_fetch_wait_ms: int = Field(
        default=50,
        ge=0,
        le=5000,
        description="Fetch wait of an idle reader: less broker polling at rest, the first record after waits longer",
    )
    kafka_session_timeout_ms: int = Field(
        default=6000,
        ge=1000,
        le=300000,
        description="Consumer group session timeout (a dead consumer's partitions move after it)",
    )
    kafka_heartbeat_interval_ms: int = Field(
        default=1000, ge=100, description="Group heartbeat; at most a third of the session timeout"
    )
    kafka_linger_ms: int = Field(
        default=0, ge=0, le=1000, description="Producer linger (batching vs latency)"
    )
    kafka_max_request_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Producer request and consumer fetch size limit"
    )
    kafka_commit_interval_ms: int = Field(default=100, ge=1, description="How often finished offsets commit")
    kafka_commit_timeout_s: float = Field(default=10.0, gt=0, description="Bound on one offset commit")
    topic_replication_factor: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Replicas of each topic `switchyard topics --create` makes (3 on a production cluster)",
    )

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap_shape(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        for part in v.split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port...], got {part!r}")
        return v
