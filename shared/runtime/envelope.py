"""The envelope codec: protobuf on the wire, JSON (protobuf JSON mapping) accepted on ingest.

Decoding and validation raise `Rejected` with a stable code and a reason a person can
act on; the bus turns that into a DLQ record instead of a retry.
"""

from __future__ import annotations

import json
import re
import uuid
from enum import StrEnum

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from switchyard.v1.envelope_pb2 import (
    ChatMessage,
    ContentPart,
    Envelope,
    Error,
    Kind,
    Priority,
    ReplyFormat,
    Request,
    SamplingParams,
    Timing,
)

__all__ = [
    "CONTENT_TYPE_JSON",
    "CONTENT_TYPE_PROTOBUF",
    "ChatMessage",
    "ContentPart",
    "Envelope",
    "ErrorCode",
    "Kind",
    "Priority",
    "DependencyUnavailable",
    "REPLY_FORMAT_HEADER",
    "ReplyFormat",
    "Rejected",
    "Request",
    "SamplingParams",
    "Timing",
    "decode",
    "encode",
    "encode_reply",
    "from_json",
    "parse_reply_format",
    "reply_format_for",
    "new_request_id",
    "set_error",
    "to_json",
    "validate",
]

CONTENT_TYPE_PROTOBUF = "application/x-protobuf"
CONTENT_TYPE_JSON = "application/json"
_PROTOBUF_TYPES = (CONTENT_TYPE_PROTOBUF, "application/protobuf", "application/vnd.google.protobuf")
# A request's header that picks the encoding of its reply on sy.responses: json | protobuf.
REPLY_FORMAT_HEADER = "sy-reply-format"

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")
TENANT_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
ROLES = {"system", "user", "assistant", "tool", "developer"}
PART_TYPES = {"text", "image_url", "input_audio"}
MAX_N = 16
MAX_MAX_TOKENS = 1 << 20


class ErrorCode(StrEnum):
    BAD_PROTOBUF = "bad_protobuf"
    INVALID_JSON = "invalid_json"
    SCHEMA_INVALID = "schema_invalid"
    INVALID_REQUEST = "invalid_request"
    RECORD_TOO_LARGE = "record_too_large"
    UNSUPPORTED_CONTENT_TYPE = "unsupported_content_type"
    NO_POOL = "no_pool"
    MODEL_NOT_FOUND = "model_not_found"
    ADAPTER_NOT_FOUND = "adapter_not_found"
    ADAPTER_INVALID = "adapter_invalid"
    RETRIES_EXHAUSTED = "retries_exhausted"
    DELIVERIES_EXHAUSTED = "deliveries_exhausted"  # the record's handler killed its process again and again
    OUTPUT_TOO_LARGE = "output_too_large"
    PRODUCE_REJECTED = "produce_rejected"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    UNAUTHENTICATED = "unauthenticated"  # an ingest record that does not prove its tenant (issue 33)
    INTERNAL = "internal"


class Rejected(Exception):
    """A record that can never succeed: goes to the DLQ with this code and reason, no retries."""

    def __init__(self, code: ErrorCode | str, reason: str, http_status: int = 400) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = str(code)
        self.reason = reason
        self.http_status = http_status


class DependencyUnavailable(Exception):
    """A dependency (object store, Milvus, Triton, the registry) cannot be reached right now.

    Not the record's fault: the bus waits it out with backoff until the dependency returns or the
    stage stops, and never counts it towards SY_STAGE_MAX_ATTEMPTS or dead-letters for it.
    """

    def __init__(self, dependency: str, reason: str) -> None:
        super().__init__(f"{dependency} unavailable: {reason}")
        self.dependency = dependency
        self.reason = reason


def new_request_id() -> str:
    return uuid.uuid4().hex


def encode(env: Envelope) -> bytes:
    return env.SerializeToString()


def to_json(env: Envelope) -> str:
    return json_format.MessageToJson(env, preserving_proto_field_name=True, indent=None)


def encode_reply(env: Envelope) -> tuple[bytes, str]:
    """A reply's value and content-type: JSON when its request asked for it (reply_format),
    protobuf otherwise. The one place the encoding of a record on sy.responses is decided."""
    if env.reply_format == ReplyFormat.REPLY_FORMAT_JSON:
        return to_json(env).encode(), CONTENT_TYPE_JSON
    return encode(env), CONTENT_TYPE_PROTOBUF


def media_type(content_type: str | None) -> str:
    """`application/json; charset=utf-8` -> `application/json`; protobuf when absent."""
    return (content_type or CONTENT_TYPE_PROTOBUF).split(";")[0].strip().lower()


def parse_reply_format(value: str) -> int:
    """The `sy-reply-format` header's value (json | protobuf, any case) as a ReplyFormat."""
    v = value.strip().lower()
    if v == "json":
        return ReplyFormat.REPLY_FORMAT_JSON
    if v in ("protobuf", "proto"):
        return ReplyFormat.REPLY_FORMAT_PROTOBUF
    raise Rejected(
        ErrorCode.INVALID_REQUEST,
        f"header {REPLY_FORMAT_HEADER} must be json or protobuf, got {value[:40]!r}",
    )


def reply_format_for(content_type: str | None, asked: str | None, env: Envelope | None = None) -> int:
    """How the reply to an ingest record is encoded: its `sy-reply-format` header (`asked`) first,
    then a reply_format the envelope itself names, then the record's own content-type (JSON in,
    JSON out); else unspecified, which is protobuf. A bad header value raises Rejected."""
    if asked is not None:
        return parse_reply_format(asked)
    if env is not None and env.reply_format != ReplyFormat.REPLY_FORMAT_UNSPECIFIED:
        return env.reply_format
    if media_type(content_type) == CONTENT_TYPE_JSON:
        return ReplyFormat.REPLY_FORMAT_JSON
    return ReplyFormat.REPLY_FORMAT_UNSPECIFIED


# Enum fields a JSON producer may name by their short name, any case ("chat", "Batch"), beside
# the protobuf JSON mapping's full names (KIND_CHAT) and numbers.
_ENUM_FIELDS = {"kind": Kind, "priority": Priority, "reply_format": ReplyFormat, "replyFormat": ReplyFormat}


class _EnumNames:
    """Spellings of one enum: `chat`, `Chat` and `kind_chat` all name KIND_CHAT. The
    UNSPECIFIED value has no short name (leaving the field out says that)."""

    def __init__(self, enum: type) -> None:
        full = list(enum.keys())  # type: ignore[attr-defined]
        prefix = full[0].removesuffix("UNSPECIFIED")  # KIND_, PRIORITY_, REPLY_FORMAT_
        self.short = [n.removeprefix(prefix).lower() for n in full if not n.endswith("_UNSPECIFIED")]
        self.names = {n.lower(): n for n in full} | {s: prefix + s.upper() for s in self.short}

    def refusal(self, field: str, got: str) -> Rejected:
        return Rejected(
            ErrorCode.SCHEMA_INVALID,
            f"{field} {got} is not one of {', '.join(self.short)} (any case) or a full name such as "
            f"{self.names[self.short[0]]}",
        )


_ENUM_NAMES = {field: _EnumNames(enum) for field, enum in _ENUM_FIELDS.items()}


def _short_enum_names(obj: dict[str, object]) -> None:
    """Rewrite short enum names of the envelope's own fields to their full names (in place);
    refuse an unknown name, and a bool or float, which ParseDict would take as 1 or truncate."""
    for field, enum in _ENUM_NAMES.items():
        value = obj.get(field)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            continue  # absent, null, or a number: the JSON mapping's own forms (validate checks it)
        if not isinstance(value, str):
            raise enum.refusal(field, f"of type {type(value).__name__}")
        full = enum.names.get(value.lower())
        if full is None:
            raise enum.refusal(field, repr(value[:40]))
        obj[field] = full


def from_json(text: str | bytes) -> Envelope:
    """Parse the protobuf JSON mapping strictly: unknown fields and wrong types are errors.
    Enum fields also take short names in any case (`"kind": "chat"`)."""
    try:
        obj = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Rejected(ErrorCode.INVALID_JSON, f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise Rejected(ErrorCode.SCHEMA_INVALID, f"expected a JSON object, got {type(obj).__name__}")
    _short_enum_names(obj)
    env = Envelope()
    try:
        json_format.ParseDict(obj, env, ignore_unknown_fields=False)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise Rejected(ErrorCode.SCHEMA_INVALID, f"does not match switchyard.v1.Envelope: {exc}") from None
    return env


def decode(value: bytes | None, content_type: str | None = None) -> Envelope:
    """Decode a record value by its content-type header (protobuf when absent)."""
    if value is None:
        raise Rejected(ErrorCode.BAD_PROTOBUF, "record has no value")
    ct = media_type(content_type)
    if ct == CONTENT_TYPE_JSON:
        return from_json(value)
    if ct not in _PROTOBUF_TYPES:
        raise Rejected(
            ErrorCode.UNSUPPORTED_CONTENT_TYPE,
            f"content-type {ct!r} not supported; use {CONTENT_TYPE_PROTOBUF} or {CONTENT_TYPE_JSON}",
            http_status=415,
        )
    env = Envelope()
    try:
        env.ParseFromString(value)
    except DecodeError as exc:
        raise Rejected(ErrorCode.BAD_PROTOBUF, f"not a switchyard.v1.Envelope: {exc}") from None
    return env


def _invalid(reason: str) -> Rejected:
    return Rejected(ErrorCode.INVALID_REQUEST, reason)


def validate(env: Envelope) -> None:
    """Check what the schema cannot express; raise Rejected naming the first bad field."""
    if not REQUEST_ID_RE.match(env.request_id):
        raise _invalid(f"request_id must match {REQUEST_ID_RE.pattern}, got {env.request_id[:140]!r}")
    if not TENANT_RE.match(env.tenant):
        raise _invalid(f"tenant must match {TENANT_RE.pattern}, got {env.tenant[:80]!r}")
    if env.kind == Kind.KIND_UNSPECIFIED:
        raise _invalid("kind is required (chat, completion, embedding or rollout)")
    # proto3 enums are open: an unknown number decodes fine (JSON too) and must be refused here.
    if env.kind not in Kind.values():
        raise _invalid(f"kind {int(env.kind)} is not one of {sorted(Kind.keys())}")
    if env.priority not in Priority.values():
        raise _invalid(f"priority {int(env.priority)} is not one of {sorted(Priority.keys())}")
    if env.reply_format not in ReplyFormat.values():
        raise _invalid(f"reply_format {int(env.reply_format)} is not one of {sorted(ReplyFormat.keys())}")
    if not env.model:
        raise _invalid("model is required")
    req = env.request
    if env.kind == Kind.KIND_ROLLOUT and env.rollout.prompts:
        _validate_rollout_job(env)  # a job: its prompts are the requests
    elif env.kind in (Kind.KIND_CHAT, Kind.KIND_ROLLOUT) and req.prompt == "" and not req.messages:
        raise _invalid("request.messages must not be empty")
    if env.kind == Kind.KIND_COMPLETION and not req.prompt:
        raise _invalid("request.prompt is required for a completion")
    for i, m in enumerate(req.messages):
        if m.role not in ROLES:
            raise _invalid(f"request.messages[{i}].role must be one of {sorted(ROLES)}, got {m.role[:40]!r}")
        if m.content and m.parts:
            raise _invalid(f"request.messages[{i}] has both content and parts")
        for j, p in enumerate(m.parts):
            if p.type not in PART_TYPES:
                raise _invalid(f"request.messages[{i}].parts[{j}].type {p.type[:40]!r} is not supported")
    s = req.sampling
    if s.HasField("temperature") and not 0.0 <= s.temperature <= 2.0:
        raise _invalid(f"sampling.temperature must be in [0, 2], got {s.temperature}")
    if s.HasField("top_p") and not 0.0 < s.top_p <= 1.0:
        raise _invalid(f"sampling.top_p must be in (0, 1], got {s.top_p}")
    if s.HasField("n") and not 1 <= s.n <= MAX_N:
        raise _invalid(f"sampling.n must be in [1, {MAX_N}], got {s.n}")
    if s.HasField("max_tokens") and not 1 <= s.max_tokens <= MAX_MAX_TOKENS:
        raise _invalid(f"sampling.max_tokens must be at least 1, got {s.max_tokens}")
    if s.HasField("min_p") and not 0.0 <= s.min_p <= 1.0:
        raise _invalid(f"sampling.min_p must be in [0, 1], got {s.min_p}")
    if any(not -100.0 <= b <= 100.0 for b in s.logit_bias.values()):
        raise _invalid("sampling.logit_bias values must be in [-100, 100]")
    if env.deadline_unix_ms < 0:
        raise _invalid("deadline_unix_ms must not be negative")


MAX_ROLLOUT_PROMPTS = 4096


def _validate_rollout_job(env: Envelope) -> None:
    """A rollout job record (RL serving, issue 8): every prompt must be a servable request."""
    if len(env.rollout.prompts) > MAX_ROLLOUT_PROMPTS:
        raise _invalid(f"rollout.prompts holds at most {MAX_ROLLOUT_PROMPTS} prompts")
    for i, p in enumerate(env.rollout.prompts):
        if not p.prompt and not p.messages:
            raise _invalid(f"rollout.prompts[{i}] needs messages or a prompt")
        for j, m in enumerate(p.messages):
            if m.role not in ROLES:
                raise _invalid(f"rollout.prompts[{i}].messages[{j}].role must be one of {sorted(ROLES)}")
    if not env.rollout.reward_spec.functions:
        raise _invalid("rollout.reward_spec.functions must name at least one reward function")


def set_error(env: Envelope, code: str, message: str, stage: str, http_status: int = 500) -> Envelope:
    """Mark the envelope failed (in place) so a waiting requester gets the reason."""
    env.error.CopyFrom(Error(code=code, message=message, stage=stage, http_status=http_status))
    return env
