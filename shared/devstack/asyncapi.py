"""Generate the AsyncAPI 3.0 document of the topics from shared.runtime.topics and the protobuf descriptors.

The topics are a public API (DESIGN §3); this document is generated, never hand-edited:
`make proto` writes proto/asyncapi.json and a unit test fails when it is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from switchyard.v1 import envelope_pb2, events_pb2

from shared.runtime.bus import JOB_HEADER, SENT_NS_HEADER
from shared.runtime.config import Settings
from shared.runtime.dead_letters import DLQ_CODE_HEADER, DLQ_REASON_HEADER, DLQ_STAGE_HEADER
from shared.runtime.envelope import REPLY_FORMAT_HEADER
from shared.runtime.stage import CACHE_SHADOW_JOB
from shared.runtime.topics import all_topics

OUTPUT = Path(__file__).resolve().parents[2] / "proto" / "asyncapi.json"

_SCALARS: dict[int, dict[str, Any]] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number"},
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
    FieldDescriptor.TYPE_INT32: {"type": "integer"},
    FieldDescriptor.TYPE_SINT32: {"type": "integer"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "minimum": 0},
    FieldDescriptor.TYPE_FIXED32: {"type": "integer", "minimum": 0},
    # 64-bit integers are JSON strings in the protobuf JSON mapping (numbers are accepted too).
    FieldDescriptor.TYPE_INT64: {"type": ["string", "integer"], "format": "int64"},
    FieldDescriptor.TYPE_SINT64: {"type": ["string", "integer"], "format": "int64"},
    FieldDescriptor.TYPE_UINT64: {"type": ["string", "integer"], "format": "uint64"},
    FieldDescriptor.TYPE_FIXED64: {"type": ["string", "integer"], "format": "uint64"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "contentEncoding": "base64"},
}


def _field_schema(f: FieldDescriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        if f.message_type.GetOptions().map_entry:
            value = f.message_type.fields_by_name["value"]
            return {"type": "object", "additionalProperties": _field_schema(value, schemas)}
        _message_schema(f.message_type, schemas)
        item: dict[str, Any] = {"$ref": f"#/components/schemas/{f.message_type.full_name}"}
    elif f.type == FieldDescriptor.TYPE_ENUM:
        item = {"type": "string", "enum": [v.name for v in f.enum_type.values]}
    else:
        item = dict(_SCALARS[f.type])
    if f.is_repeated:
        return {"type": "array", "items": item}
    return item


def _message_schema(d: Descriptor, schemas: dict[str, Any]) -> None:
    if d.full_name in schemas:
        return
    schemas[d.full_name] = {}  # placeholder against recursion
    props = {f.name: _field_schema(f, schemas) for f in d.fields}
    schemas[d.full_name] = {"type": "object", "additionalProperties": False, "properties": props}


def _header_schemas() -> dict[str, Any]:
    """Record headers: those of every envelope record, and a dead letter's reason headers."""
    dead_letter = {
        "type": "object",
        "description": "A dead letter says why in its headers, so a Kafka tool reads it without the schema",
        "properties": {
            DLQ_CODE_HEADER: {"type": "string", "description": "stable error code, e.g. schema_invalid"},
            DLQ_REASON_HEADER: {"type": "string", "description": "why, in words (ASCII, at most 512 chars)"},
            DLQ_STAGE_HEADER: {"type": "string", "description": "the stage that gave up on the record"},
            "sy-source-topic": {"type": "string", "description": "where the record was read"},
            "sy-source-partition": {"type": "string", "description": "its partition (decimal)"},
            "sy-source-offset": {"type": "string", "description": "its offset (decimal)"},
            "sy-original-size": {"type": "string", "description": "bytes of the original value"},
            "sy-original-sha256": {"type": "string", "description": "sha256 of the original value"},
        },
    }
    record = {
        "type": "object",
        "properties": {
            "content-type": {
                "type": "string",
                "enum": ["application/x-protobuf", "application/json"],
                "description": "application/json (protobuf JSON mapping) is accepted on the ingest topic; "
                "a reply on the responses topic (and its stream deltas) is application/json when its "
                "request was JSON or asked for it",
            },
            REPLY_FORMAT_HEADER: {
                "type": "string",
                "enum": ["json", "protobuf"],
                "description": "ingest records: how the reply is encoded (default: as the request)",
            },
            "traceparent": {"type": "string", "description": "W3C trace context"},
            SENT_NS_HEADER: {"type": "string", "description": "producer wall clock, ns since the epoch"},
            JOB_HEADER: {
                "type": "string",
                "enum": ["rollout", "batch", CACHE_SHADOW_JOB, ""],
                "description": "envelope records: the job the record belongs to (empty: a single request; "
                "cache_shadow: a cache shadow check, answered to the cache alone); "
                "readers that want one job pass over the others undecoded, and read records without it",
            },
        },
    }
    return {"RecordHeaders": record, "DeadLetterHeaders": dead_letter}


def document(settings: Settings) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for d in (
        envelope_pb2.Envelope.DESCRIPTOR,
        events_pb2.DeadLetter.DESCRIPTOR,
        events_pb2.Heartbeat.DESCRIPTOR,
    ):
        _message_schema(d, schemas)
        messages[d.name] = {
            "name": d.name,
            "title": d.full_name,
            "contentType": "application/x-protobuf",
            "payload": {"$ref": f"#/components/schemas/{d.full_name}"},
            "headers": {"$ref": "#/components/schemas/RecordHeaders"},
        }
    # The same envelope in the protobuf JSON mapping: what a JSON producer writes to the ingest
    # topic and, for such a request, what its reply on sy.responses is (docs/kafka.md).
    messages["EnvelopeJson"] = dict(
        messages["Envelope"],
        name="EnvelopeJson",
        contentType="application/json",
        description="switchyard.v1.Envelope in the protobuf JSON mapping (field names as in the .proto; "
        "64-bit integers as strings; enums by name, short names such as chat accepted on ingest)",
    )
    messages["DeadLetter"]["headers"] = {"$ref": "#/components/schemas/DeadLetterHeaders"}
    schemas.update(_header_schemas())
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for t in all_topics(settings):
        cid = t.spec.suffix.replace(".", "_")
        msg = t.spec.schema.rsplit(".", 1)[1]
        names = [msg, "EnvelopeJson"] if t.spec.suffix in ("requests", "responses") else [msg]
        channels[cid] = {
            "address": t.name,
            "description": t.spec.description,
            "messages": {m: {"$ref": f"#/components/messages/{m}"} for m in names},
            "bindings": {
                "kafka": {
                    "partitions": t.partitions,
                    "topicConfiguration": {"cleanup.policy": ["compact" if t.spec.compacted else "delete"]},
                }
            },
            "x-key": t.spec.key,
        }
        action = "send" if t.spec.suffix == "requests" else "receive"
        operations[f"{action}_{cid}"] = {"action": action, "channel": {"$ref": f"#/channels/{cid}"}}
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Switchyard topics",
            "version": "v1",
            "description": "Kafka topics of the Switchyard pipeline; operations are from an outside client's view.",
        },
        "defaultContentType": "application/x-protobuf",
        "servers": {
            "embedded": {"host": "127.0.0.1:9092", "protocol": "kafka", "description": "switchyard up"}
        },
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }


def render(settings: Settings) -> str:
    return json.dumps(document(settings), indent=2, sort_keys=False) + "\n"


def main() -> None:
    # Generated for the default settings so the committed copy does not depend on the environment.
    OUTPUT.write_text(render(Settings()))
    print(OUTPUT)


if __name__ == "__main__":
    main()
