"""Records on the bus: headers, the producer, and the connection options every client shares.

Producing is at-least-once with acks=all: `Producer.send_all` returns once the broker acknowledged
every record, and `Producer.deliverable()` is false while sends fail for SY_STALL_AFTER_S.
The rest of the bus: shared.runtime.consumer (StageConsumer, the stage rules of DESIGN.md §3),
shared.runtime.attempts (what one record becomes), shared.runtime.dead_letters,
shared.runtime.follow (readers of whole topics without a group), shared.runtime.embedded_broker
(workarounds for the embedded broker).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer
from aiokafka.structs import ConsumerRecord
from google.protobuf import json_format
from switchyard.v1.events_pb2 import StreamDelta

from shared.runtime.config import Settings
from shared.runtime.envelope import (
    CONTENT_TYPE_JSON,
    CONTENT_TYPE_PROTOBUF,
    REPLY_FORMAT_HEADER,
    Envelope,
    Rejected,
    ReplyFormat,
    decode,
    media_type,
    reply_format_for,
)
from shared.runtime.telemetry import PRODUCED, get_logger

log = get_logger(__name__)

SENT_NS_HEADER = "sy-sent-ns"
CONTENT_TYPE_HEADER = "content-type"
# The job an envelope record belongs to ("rollout", "batch"; empty for a single request), so a
# reader that wants one kind of job skips the rest of a shared topic without decoding them.
JOB_HEADER = "sy-job"

Headers = list[tuple[str, bytes]]


def header(headers: Sequence[tuple[str, bytes | None]] | None, key: str) -> str | None:
    """Last value of a header as text (Kafka allows repeats; the last one wins)."""
    found = None
    for k, v in headers or []:
        if k == key and v is not None:
            found = v.decode("latin-1")
    return found


def sent_ns(rec: ConsumerRecord) -> int | None:
    """When the record was produced: our header (ns), else the Kafka CreateTime (ms) of outside producers."""
    v = header(rec.headers, SENT_NS_HEADER)
    if v and v.isdigit():
        return int(v)
    if rec.timestamp_type == 0 and rec.timestamp and rec.timestamp > 0:
        return int(rec.timestamp) * 1_000_000
    return None


def decode_record(rec: ConsumerRecord) -> Envelope:
    """The envelope of a record, by its content-type header: what every reader of sy.responses
    uses, as a reply there is JSON when its request asked for it (docs/kafka.md)."""
    return decode(rec.value, header(rec.headers, CONTENT_TYPE_HEADER))


def reply_format_of(
    headers: Sequence[tuple[str, bytes | None]] | None, env: Envelope | None = None, strict: bool = True
) -> int:
    """How the reply to an ingest record is encoded (envelope.reply_format_for), from its
    headers. `strict=False` (an error reply for a record already dying): a bad header value
    counts as absent instead of raising."""
    ct, asked = header(headers, CONTENT_TYPE_HEADER), header(headers, REPLY_FORMAT_HEADER)
    try:
        return reply_format_for(ct, asked, env)
    except Rejected:
        if strict:
            raise
        return reply_format_for(ct, None, env)


def delta_value(delta: StreamDelta, reply_format: int) -> tuple[bytes, Headers]:
    """A sy.stream delta's value and headers: JSON (protobuf JSON mapping) for a request whose
    reply is JSON, so a JSON client reads its stream without our schema too."""
    if reply_format == ReplyFormat.REPLY_FORMAT_JSON:
        text = json_format.MessageToJson(delta, preserving_proto_field_name=True, indent=None)
        return text.encode(), [(CONTENT_TYPE_HEADER, CONTENT_TYPE_JSON.encode())]
    return delta.SerializeToString(), [(CONTENT_TYPE_HEADER, CONTENT_TYPE_PROTOBUF.encode())]


def decode_delta(rec: ConsumerRecord) -> StreamDelta:
    """A sy.stream record by its content-type (protobuf or JSON); raises on anything else."""
    if media_type(header(rec.headers, CONTENT_TYPE_HEADER)) == CONTENT_TYPE_JSON:
        return json_format.Parse(rec.value or b"", StreamDelta(), ignore_unknown_fields=True)
    return StreamDelta.FromString(rec.value or b"")


def rollout_envelopes(records: Iterable[ConsumerRecord]) -> list[Envelope]:
    """The envelopes of sy.rewards records that belong to a rollout: the gateway's store and the
    reward service's dedupe set read the topic alike. A record that does not decode is passed over."""
    envs = []
    for rec in records:
        try:
            env = decode(rec.value, header(rec.headers, CONTENT_TYPE_HEADER))
        except Rejected:
            continue
        if env.rollout.rollout_id:
            envs.append(env)
    return envs


def client_kwargs(settings: Settings) -> dict[str, object]:
    """Connection options shared by producers, consumers and admin clients."""
    kw: dict[str, object] = {
        "bootstrap_servers": settings.kafka_bootstrap or "127.0.0.1:9092",
        "security_protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_sasl_mechanism:
        kw["sasl_mechanism"] = settings.kafka_sasl_mechanism
        kw["sasl_plain_username"] = settings.kafka_sasl_username
        kw["sasl_plain_password"] = (
            settings.kafka_sasl_password.get_secret_value() if settings.kafka_sasl_password else None
        )
    if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        kw["ssl_context"] = create_ssl_context()
    return kw


# The longest partition number a reply_to may name (Kafka topics have at most thousands).
_REPLY_PARTITION_DIGITS = 5


def reply_partition(reply_to: str, responses_topic: str) -> int | None:
    """The partition of sy.responses (and of sy.stream) the requester reads, from an envelope's
    `reply_to` (`<responses topic>:<partition>`, set by the gateway replica that holds the
    connection); None for anything else, so the key spreads the reply as before. A foreign
    producer may write any text there: a partition the topic lacks is dropped at send time."""
    topic, sep, part = reply_to.rpartition(":")
    if not sep or topic != responses_topic or not part.isdigit() or len(part) > _REPLY_PARTITION_DIGITS:
        return None
    return int(part)


@dataclass(slots=True)
class OutRecord:
    """A record to produce: the bus adds the sent-time header and awaits the broker's ack."""

    topic: str
    value: bytes
    key: bytes | None = None
    headers: Headers = field(default_factory=list)
    partition: int | None = None


class Producer:
    """aiokafka producer with acks=all; `send_all` returns once every record is acknowledged."""

    def __init__(self, settings: Settings, client_id: str = "switchyard") -> None:
        self._settings = settings
        self._p = AIOKafkaProducer(
            **client_kwargs(settings),  # type: ignore[arg-type]
            client_id=client_id,
            acks="all",
            # Idempotence/transactions are off: the embedded broker refuses InitProducerId v0,
            # and consumers dedupe by request_id anyway (DESIGN §3).
            enable_idempotence=False,
            linger_ms=settings.kafka_linger_ms,
            max_request_size=settings.kafka_max_request_bytes,
            request_timeout_ms=30000,
        )

        # Since when sends have been failing with no success after (None: delivering).
        self._failing_since: float | None = None

    async def start(self) -> None:
        await self._p.start()

    async def stop(self) -> None:
        await self._p.stop()

    def deliverable(self, stall_after_s: float | None = None) -> bool:
        """False once sends have failed for SY_STALL_AFTER_S with no acknowledged send since."""
        since = self._failing_since
        limit = self._settings.stall_after_s if stall_after_s is None else stall_after_s
        return since is None or time.monotonic() - since < limit

    def _failed(self) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    async def send_soon(self, r: OutRecord) -> asyncio.Future[object]:
        """Hand a record to the client's batcher; the returned future resolves on the broker's ack."""
        headers = [(k, v) for k, v in r.headers if k != SENT_NS_HEADER]
        headers.append((SENT_NS_HEADER, str(time.time_ns()).encode()))
        partition = await self._known_partition(r.topic, r.partition)
        try:
            fut = await self._p.send(r.topic, r.value, key=r.key, headers=headers, partition=partition)
        except Exception:
            self._failed()
            # A restarted broker re-creates its topics: metadata cached before that can lack a
            # partition ("Unrecognized partition") for minutes (metadata_max_age_ms). Refresh it
            # now, so the caller's retry sees the topics as they are.
            self._p.client.force_metadata_update()
            raise
        PRODUCED.labels(r.topic).inc()
        fut.add_done_callback(self._acked)
        return fut

    async def _known_partition(self, topic: str, partition: int | None) -> int | None:
        """The partition to produce to: one the cached metadata lacks is looked up again first
        (a restarted broker's re-created topic can have it), and one the topic still lacks after
        that (a reply_to naming a partition that does not exist) gives way to the key."""
        if partition is None:
            return None
        known = self._p.client.cluster.partitions_for_topic(topic)
        if known is None or partition in known:
            return partition
        await self._p.client.force_metadata_update()
        known = self._p.client.cluster.partitions_for_topic(topic)
        return partition if known is None or partition in known else None

    def _acked(self, fut: asyncio.Future[object]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self._failed()
        else:
            self._failing_since = None

    async def send_all(self, records: Sequence[OutRecord]) -> None:
        """Produce records (batched by the client) and wait for every ack."""
        futures = [await self.send_soon(r) for r in records]
        for fut in futures:
            await fut

    async def send(self, record: OutRecord) -> None:
        await self.send_all([record])


def backoff_s(attempt: int, base_ms: int, max_ms: int) -> float:
    """Exponential backoff with full jitter, attempt counting from 1."""
    return random.uniform(0, min(max_ms, base_ms * (2 ** (attempt - 1)))) / 1000.0


def off_path_wait_ms(settings: Settings) -> int:
    """Fetch wait of readers no reply waits for (state topics, cache write-back, batch results):
    on the embedded broker every held fetch costs polls, and these need not answer in 5 ms."""
    return max(settings.kafka_fetch_max_wait_ms, 50)
