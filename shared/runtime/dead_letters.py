"""Dead letters: what a stage writes to the DLQ instead of a record it cannot handle.

A dead letter keeps a bounded excerpt of the input (its size and sha256 tell what it was) and
says why in headers too, so a Kafka tool reads it without our schema (DESIGN §3). Also here: the
size rule every output is held to, and the produce errors a retry cannot cure.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence

from aiokafka.errors import (
    CorruptRecordException,
    InvalidMessageError,
    InvalidRequestError,
    InvalidTimestampError,
    InvalidTopicError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)
from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import DeadLetter, Header

from shared.runtime.bus import CONTENT_TYPE_HEADER, Headers, OutRecord

# Called when a record goes to the DLQ: may fill in the dead letter's request_id/tenant and
# return extra records to produce with it (e.g. an error reply for a waiting requester).
DeadHook = Callable[[ConsumerRecord, DeadLetter], Sequence[OutRecord]]

# A dead letter keeps at most this much of the input, whatever SY_DLQ_MAX_ORIGINAL_BYTES says,
# and its headers (a foreign producer's, of any size) are cut the same way.
DLQ_EXCERPT_MAX = 64 * 1024
HEADER_VALUE_MAX = 1024
_HEADERS_MAX = 32
_REASON_MAX = 1024

# Produce errors a retry cannot cure: the broker will never take these records.
FINAL_PRODUCE_ERRORS: tuple[type[BaseException], ...] = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    RecordListTooLargeError,
    CorruptRecordException,
    InvalidMessageError,
    InvalidTopicError,
    InvalidRequestError,
    InvalidTimestampError,
    TopicAuthorizationFailedError,
    TypeError,
    ValueError,
)

# Dead-letter headers, named as Kafka Connect's are, so kcat or any DLQ tool reads the reason.
DLQ_CODE_HEADER = "sy-error-code"
DLQ_REASON_HEADER = "sy-error-reason"
DLQ_STAGE_HEADER = "sy-error-stage"


def bounded(text: str, limit: int = _REASON_MAX) -> str:
    """A reason or id cut to `limit` characters: exception texts may echo the input."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def record_size(r: OutRecord) -> int:
    """Bytes a record takes on the wire, near enough to hold it to SY_MAX_RECORD_BYTES."""
    return len(r.value) + len(r.key or b"") + sum(len(k) + len(v or b"") for k, v in r.headers) + 64


def dead_letter(
    rec: ConsumerRecord, stage: str, code: str, reason: str, attempts: int, max_bytes: int
) -> DeadLetter:
    """The DLQ record of `rec`: a bounded excerpt, never the whole input (DESIGN §3)."""
    value = rec.value or b""
    keep = min(max_bytes, DLQ_EXCERPT_MAX)
    key = rec.key or b""
    return DeadLetter(
        original_value=value[:keep],
        original_key=key[:HEADER_VALUE_MAX],
        original_headers=[
            Header(key=bounded(k, 256), value=(v or b"")[:HEADER_VALUE_MAX])
            for k, v in (rec.headers or [])[:_HEADERS_MAX]
        ],
        topic=rec.topic,
        partition=rec.partition,
        offset=rec.offset,
        stage=stage,
        reason=bounded(reason),
        error_code=code,
        attempts=attempts,
        failed_unix_ns=time.time_ns(),
        original_size=len(value),
        truncated=len(value) > keep,
        original_sha256=hashlib.sha256(value).hexdigest(),
    )


def dlq_headers(dl: DeadLetter) -> Headers:
    """What a Kafka tool needs to read a dead letter without our protobuf schema."""

    def ascii_(text: str) -> bytes:
        return text.encode("ascii", "replace")

    return [
        (CONTENT_TYPE_HEADER, b"application/x-protobuf"),
        ("sy-stage", dl.stage.encode()),
        (DLQ_CODE_HEADER, ascii_(dl.error_code)),
        (DLQ_REASON_HEADER, ascii_(bounded(dl.reason, 512))),
        (DLQ_STAGE_HEADER, dl.stage.encode()),
        ("sy-source-topic", ascii_(dl.topic)),
        ("sy-source-partition", str(dl.partition).encode()),
        ("sy-source-offset", str(dl.offset).encode()),
        ("sy-original-size", str(dl.original_size).encode()),
        ("sy-original-sha256", dl.original_sha256.encode()),
    ]


def dlq_record(topic: str, rec: ConsumerRecord, dl: DeadLetter) -> OutRecord:
    """The DLQ record carrying `dl`, keyed as its input was (a long key cut short)."""
    key = rec.key[:HEADER_VALUE_MAX] if rec.key is not None else None
    return OutRecord(topic=topic, value=dl.SerializeToString(), key=key, headers=dlq_headers(dl))
