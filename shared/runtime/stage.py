"""Envelope stages: decode, trace, time and re-encode around a plain handler function.

A stage's logic is `async def handle(env) -> list[Emit]` with no Kafka in it; this module
adds what every stage does the same way: content-type decoding, validation, the queue-wait
timing of the hop it came over, its own timing entry, one span per record (child of the
producer's span via `traceparent`), log context, and an error reply when a record dies.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import DeadLetter

from shared.runtime.attempts import Handler
from shared.runtime.bus import (
    CONTENT_TYPE_HEADER,
    JOB_HEADER,
    OutRecord,
    Producer,
    decode_record,
    header,
    reply_format_of,
    reply_partition,
    sent_ns,
)
from shared.runtime.config import Settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.dead_letters import bounded
from shared.runtime.envelope import (
    CONTENT_TYPE_PROTOBUF,
    REQUEST_ID_RE,
    TENANT_RE,
    Envelope,
    ErrorCode,
    Kind,
    encode,
    encode_reply,
    set_error,
    validate,
)
from shared.runtime.telemetry import (
    add_timing,
    bind_request,
    current_trace_id,
    inject_headers,
    record_span,
)


@dataclass(slots=True)
class Emit:
    """An envelope to publish; the key defaults to the request id."""

    topic: str
    envelope: Envelope
    key: str | None = None
    partition: int | None = None  # explicit partition (adapter affinity); None = hash the key


EnvelopeHandler = Callable[[Envelope], Awaitable[list[Emit]]]
# Checks a decoded record before its handler sees it (the ingest signature); raises Rejected.
RecordCheck = Callable[[ConsumerRecord, Envelope], None]


# A cache shadow check (services/cache/shadow.py): a served hit sent to the engine again under a
# request id of its own; its answer is for the cache's write-back alone, never for a requester.
CACHE_SHADOW_TIER = "shadow"  # CacheInfo.tier of such a request
CACHE_SHADOW_JOB = "cache_shadow"


def job_of(env: Envelope) -> str:
    """The job an envelope belongs to, as its records' JOB_HEADER says."""
    if env.cache.tier == CACHE_SHADOW_TIER:
        return CACHE_SHADOW_JOB
    if env.kind == Kind.KIND_ROLLOUT or env.rollout.rollout_id:
        return "rollout"
    return "batch" if env.batch_id else ""


def out_record(emit: Emit, replies: str | None = None) -> OutRecord:
    """Encode an Emit with the current trace context and its job in its headers.

    Protobuf, except a reply on `replies` (sy.responses) to a request that asked for JSON
    (Envelope.reply_format, set at ingest): every stage that answers comes through here. A reply
    goes to the partition its `reply_to` names, the one its gateway replica reads.
    """
    if replies is not None and emit.topic == replies:
        value, content_type = encode_reply(emit.envelope)
    else:
        value, content_type = encode(emit.envelope), CONTENT_TYPE_PROTOBUF
    headers = [
        (CONTENT_TYPE_HEADER, content_type.encode()),
        (JOB_HEADER, job_of(emit.envelope).encode()),
    ]
    inject_headers(headers)
    key = emit.key if emit.key is not None else emit.envelope.request_id
    partition = emit.partition
    if partition is None and replies is not None and emit.topic == replies:
        # The gateway replica holding the connection reads this partition only (reply_to).
        partition = reply_partition(emit.envelope.reply_to, replies)
    return OutRecord(
        topic=emit.topic,
        value=value,
        key=key.encode(),
        headers=headers,
        partition=partition,
    )


def envelope_handler(
    stage: str,
    handle: EnvelopeHandler,
    *,
    validate_input: bool = True,
    jobs: Collection[str] | None = None,
    check: RecordCheck | None = None,
    replies: str | None = None,
) -> Handler:
    """Wrap a plain envelope handler into a bus handler.

    `replies`: the sy.responses topic, whose records are encoded as their request asked
    (out_record); envelope_consumer passes it.

    `jobs`: the only jobs this stage handles (JOB_HEADER). A record whose header names another is
    passed over undecoded, with no span: the reward and batch readers of sy.responses see every
    interactive answer, and decoding, timing and tracing each one was work for nothing (and a span
    per answer in traces that have nothing to do with them). A record without the header
    (another producer's) is decoded as before.
    """
    wanted = None if jobs is None else set(jobs)

    async def on_record(rec: ConsumerRecord) -> list[OutRecord]:
        if wanted is not None:
            job = header(rec.headers, JOB_HEADER)
            if job is not None and job not in wanted:
                return []
        received = time.time_ns()
        env = decode_record(rec)
        if check is not None:
            check(rec, env)
        if validate_input:
            validate(env)
        sent = sent_ns(rec)
        if sent is not None:
            add_timing(env, "queue", sent, received, topic=rec.topic, to=stage)
        with record_span(
            stage, rec.headers, rec.topic, rec.partition, rec.offset, env.request_id, env.tenant
        ):
            bind_request(env, current_trace_id())
            start = time.time_ns()
            emits = await handle(env)
            end = time.time_ns()
            seen: set[int] = set()
            for e in emits:
                if id(e.envelope) not in seen:
                    seen.add(id(e.envelope))
                    add_timing(e.envelope, stage, start, end)
            return [out_record(e, replies) for e in emits]

    return on_record


# What an error reply keeps of the request's metadata (a batch line's custom_id, say): small
# entries only, so the reply stays small whatever the producer sent.
_REPLY_METADATA_MAX = 16
_REPLY_FIELD_MAX = 256


def error_reply(env: Envelope, code: str, reason: str, stage: str, http_status: int) -> Envelope:
    """The reply a waiting requester gets when its record dies: ids, routing and the reason.

    Built field by field from what the reply's readers need (gateway, batch collector, reward,
    router), never by clearing fields of the input: a producer can put megabytes into any field,
    and an echo of them is what looped through every reader of sy.responses (issue 32).
    """
    reply = Envelope(
        request_id=env.request_id,
        tenant=env.tenant,
        kind=env.kind,
        model=bounded(env.model, _REPLY_FIELD_MAX),
        adapter=bounded(env.adapter, _REPLY_FIELD_MAX),
        priority=env.priority,
        reply_to=bounded(env.reply_to, _REPLY_FIELD_MAX),
        batch_id=bounded(env.batch_id, _REPLY_FIELD_MAX),
        created_unix_ns=env.created_unix_ns,
        policy_version=bounded(env.policy_version, _REPLY_FIELD_MAX),
    )
    if env.HasField("rollout"):
        r = env.rollout
        reply.rollout.rollout_id = bounded(r.rollout_id, _REPLY_FIELD_MAX)
        reply.rollout.group_index = r.group_index
        reply.rollout.sample_index = r.sample_index
        reply.rollout.group_size = r.group_size
        reply.rollout.num_groups = r.num_groups
        reply.rollout.accepted_unix_ns = r.accepted_unix_ns
    for k, v in list(env.metadata.items())[:_REPLY_METADATA_MAX]:
        if len(k) <= _REPLY_FIELD_MAX and len(v) <= _REPLY_FIELD_MAX:
            reply.metadata[k] = v
    return set_error(reply, code, bounded(reason), stage, http_status=http_status)


def error_reply_hook(
    stage: str, settings: Settings
) -> Callable[[ConsumerRecord, DeadLetter], list[OutRecord]]:
    """When a record dies, tell whoever waits on its request id why (DESIGN §3).

    Only a record with a valid request id and tenant gets a reply: nobody can be waiting on an
    id the gateway would never have accepted, and such an id may be the oversized field itself.
    An unauthenticated record gets none either: its ids are a stranger's claim, and a reply
    would fail whatever request of that tenant really has them.
    """
    responses = settings.topic("responses")

    def on_dead(rec: ConsumerRecord, dl: DeadLetter) -> list[OutRecord]:
        if dl.error_code == ErrorCode.UNAUTHENTICATED:
            return []
        env = _best_effort_envelope(rec)
        if env is None or not REQUEST_ID_RE.match(env.request_id) or not TENANT_RE.match(env.tenant):
            return []
        dl.request_id, dl.tenant = env.request_id, env.tenant
        status = 413 if dl.error_code in ("record_too_large", "output_too_large") else 400
        reply = error_reply(env, dl.error_code, dl.reason, stage, status)
        # Also for a record that died undecoded or at ingest: JSON in, JSON out.
        reply.reply_format = reply_format_of(rec.headers, env, strict=False)
        return [out_record(Emit(responses, reply), responses)]

    return on_dead


def _best_effort_envelope(rec: ConsumerRecord) -> Envelope | None:
    try:
        return decode_record(rec)
    except Exception:  # noqa: BLE001 - fall back to reading ids out of JSON
        pass
    try:
        obj = json.loads(rec.value or b"")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    rid, tenant = obj.get("request_id"), obj.get("tenant", "")
    if not isinstance(rid, str) or not isinstance(tenant, str):
        return None
    return Envelope(request_id=rid[:129], tenant=tenant[:65])


def envelope_consumer(
    stage: str,
    source: str,
    handle: EnvelopeHandler,
    producer: Producer,
    settings: Settings,
    *,
    validate_input: bool = True,
    max_in_flight: int | None = None,
    fetch_max_wait_ms: int | None = None,
    check: RecordCheck | None = None,
) -> StageConsumer:
    """A StageConsumer of envelopes from topic `source` (a suffix such as "requests");
    `fetch_max_wait_ms` overrides SY_KAFKA_FETCH_MAX_WAIT_MS (off-path readers poll less)."""
    return StageConsumer(
        stage=stage,
        topics=[settings.topic(source)],
        group_id=f"{settings.topic_prefix}{stage}",
        handler=envelope_handler(
            stage, handle, validate_input=validate_input, check=check, replies=settings.topic("responses")
        ),
        producer=producer,
        settings=settings,
        dlq_topic=settings.topic("dlq"),
        on_dead=error_reply_hook(stage, settings),
        max_in_flight=max_in_flight,
        fetch_max_wait_ms=fetch_max_wait_ms,
    )
