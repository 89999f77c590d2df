"""The Kafka boundary of sy.requests: who may produce (docs/security.md) and how the reply is
encoded (docs/kafka.md)."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from shared.runtime.bus import reply_format_of
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.ingest_auth import IngestVerifier
from shared.runtime.stage import RecordCheck
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


def ingest_check(settings: Settings) -> RecordCheck:
    """With SY_KAFKA_INGEST_AUTH required, a record that does not prove its tenant is
    dead-lettered as `unauthenticated` before anything reads it. Every accepted record gets its
    reply format (JSON for a JSON record or `sy-reply-format: json`); a bad `sy-reply-format`
    value is dead-lettered with the reason."""
    verifier: IngestVerifier | None = None
    if settings.ingest_auth_required:
        verifier = IngestVerifier.from_settings(settings)
    else:
        log.warning(
            "kafka ingest is not authenticated: any producer on sy.requests can act as any tenant "
            "(SY_KAFKA_INGEST_AUTH=required in production)"
        )

    def check(rec: ConsumerRecord, env: Envelope) -> None:
        if verifier is not None:
            verifier.verify(rec.value or b"", rec.headers, env)
        env.reply_format = reply_format_of(rec.headers, env)  # type: ignore[assignment]

    return check
