"""The Kafka trust boundary of sy.requests (docs/security.md)."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.ingest_auth import IngestVerifier
from shared.runtime.stage import RecordCheck
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


def ingest_check(settings: Settings) -> RecordCheck | None:
    """With SY_KAFKA_INGEST_AUTH required, a record that does not prove its tenant is
    dead-lettered as `unauthenticated` before anything reads it."""
    if not settings.ingest_auth_required:
        log.warning(
            "kafka ingest is not authenticated: any producer on sy.requests can act as any tenant "
            "(SY_KAFKA_INGEST_AUTH=required in production)"
        )
        return None
    verifier = IngestVerifier.from_settings(settings)

    def check(rec: ConsumerRecord, env: Envelope) -> None:
        verifier.verify(rec.value or b"", rec.headers, env)

    return check
