"""The soak's hostile input (issue 32): records a foreign Kafka client might write to the ingest topic.

Beside the REST traffic, a plain aiokafka producer writes 5 % hostile records straight to the
ingest topic, as a foreign Kafka client would: random bytes, truncated JSON, wrong types, a missing
model, non-object JSON, and one in 50 with a 2 MB field. At the end sy.dlq is read from the start
(no group): each hostile record the broker accepted must be there exactly once (matched by the
sha256 of its value, DeadLetter.original_sha256), with a reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

# Hostile records: their share of all records sent, and how long the DLQ may take to show them.
HOSTILE_SHARE = 0.05
HUGE_EVERY = 50  # one hostile record in 50 carries a 2 MB field
HUGE_FIELD_BYTES = 2 * 1024 * 1024
DLQ_WAIT_S = 180.0
DLQ_SETTLE_S = 15.0  # read on this long after the last one arrived: a repeat would show
TENANT = "local"  # the tenant of the stack's default key (sk-switchyard-local)
JSON_CT, PROTOBUF_CT = b"application/json", b"application/x-protobuf"
HOSTILE_CLASSES = (
    "random_bytes",
    "truncated_json",
    "wrong_types",
    "missing_model",
    "not_object",
    "huge_field",
)
_HUGE_PLACES = ("content", "metadata", "request_id", "model", "tenant")
_WRONG_TYPES: tuple[tuple[str, object], ...] = (
    ("kind", 12345),
    ("tenant", {"a": 1}),
    ("request", {"messages": "not-a-list"}),
    ("priority", "urgent"),
    ("deadline_unix_ms", "tomorrow"),
)


@dataclass(frozen=True)
class Hostile:
    """One hostile record as a foreign producer writes it to the ingest topic."""

    kind: str
    value: bytes
    content_type: bytes

    @property
    def sha256(self) -> str:
        """What the stage's dead letter carries as original_sha256 (the hash of the whole value)."""
        return hashlib.sha256(self.value).hexdigest()


def envelope(request_id: str, tenant: str = TENANT) -> dict[str, Any]:
    """A valid JSON envelope for the ingest topic (docs/kafka.md, "Producing a request")."""
    return {
        "request_id": request_id,
        "tenant": tenant,
        "kind": "KIND_CHAT",
        "model": "sy-tiny",
        "request": {
            "messages": [{"role": "user", "content": f"Say hi ({request_id})"}],
            "sampling": {"max_tokens": 4, "temperature": 0},
        },
    }


def hostile_record(rng: random.Random, i: int, nonce: str = "soak", tenant: str = TENANT) -> Hostile:
    """The i-th hostile record: one in HUGE_EVERY has a 2 MB field, the rest rotate over the other
    classes. Every value is unique (its request id, or 16+ random bytes), so its sha256 names it."""
    rid = f"hostile-{nonce}-{i}"
    body = envelope(rid, tenant)
    if i % HUGE_EVERY == 0:
        big = "x" * HUGE_FIELD_BYTES
        place = _HUGE_PLACES[(i // HUGE_EVERY) % len(_HUGE_PLACES)]
        if place == "content":
            body["request"]["messages"][0]["content"] = big
        elif place == "metadata":
            body["metadata"] = {"note": big}
        else:
            body[place] = big
        # metadata keeps the id, so a record whose huge field is the request_id stays unique too.
        body.setdefault("metadata", {})["hostile"] = rid
        return Hostile("huge_field", json.dumps(body).encode(), JSON_CT)
    kind = HOSTILE_CLASSES[i % (len(HOSTILE_CLASSES) - 1)]
    if kind == "random_bytes":
        return Hostile(kind, rng.randbytes(rng.randint(16, 400)), rng.choice([JSON_CT, PROTOBUF_CT]))
    if kind == "truncated_json":
        raw = json.dumps(body).encode()
        keep_from = raw.index(rid.encode()) + len(rid)  # the cut keeps the id: values stay unique
        return Hostile(kind, raw[: rng.randint(keep_from, len(raw) - 1)], JSON_CT)
    if kind == "wrong_types":
        field, value = rng.choice(_WRONG_TYPES)
        body[field] = value
        return Hostile(kind, json.dumps(body).encode(), JSON_CT)
    if kind == "missing_model":
        body.pop("model")
        return Hostile(kind, json.dumps(body).encode(), JSON_CT)
    shape = rng.choice(["array", "string", "number_array"])
    value: object = {"array": [body], "string": f"hello {rid}", "number_array": [i, 1, 2, 3]}[shape]
    return Hostile("not_object", json.dumps(value).encode(), JSON_CT)


def dlq_verdict(sent: list[Hostile], refused: int, letters: list[tuple[str, bool]]) -> dict[str, Any]:
    """Each hostile record the broker accepted in the DLQ exactly once. `letters`: (original_sha256,
    has a reason) of every dead letter read; `refused`: hostile records the broker would not take
    (not in its log, so not expected in the DLQ)."""
    counts = Counter(sha for sha, _ in letters)
    want = {h.sha256: h.kind for h in sent}
    missing = Counter(kind for sha, kind in want.items() if counts[sha] == 0)
    repeated = Counter(kind for sha, kind in want.items() if counts[sha] > 1)
    no_reason = sum(1 for sha, ok in letters if sha in want and not ok)
    others = sum(n for sha, n in counts.items() if sha not in want)
    return {
        "sent": len(sent) + refused,
        "by_class": dict(sorted(Counter(h.kind for h in sent).items())),
        "refused_by_broker": refused,
        "dead_lettered_once": sum(1 for sha in want if counts[sha] == 1),
        "missing_from_dlq": dict(missing),
        "dead_lettered_more_than_once": dict(repeated),
        "without_reason": no_reason,
        "other_dead_letters": others,
        "passed": bool(want) and not missing and not repeated and not no_reason,
    }


async def produce_hostile(
    bootstrap: str, topic: str, rate_rps: float, duration_s: float, out: list[Hostile], refused: list[str]
) -> None:
    """Poisson arrivals of hostile records at rate_rps for duration_s, by a plain producer."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=16 << 20, acks="all")
    await producer.start()
    content, timing = random.Random(32), random.Random(33)
    t_end = time.monotonic() + duration_s
    i = 0
    try:
        while time.monotonic() < t_end:
            rec = hostile_record(content, i)
            i += 1
            try:
                await (await producer.send(topic, rec.value, headers=[("content-type", rec.content_type)]))
                out.append(rec)
            except KafkaError as exc:
                refused.append(f"{rec.kind}: {exc!r}"[:200])
            await asyncio.sleep(timing.expovariate(rate_rps))
    finally:
        await producer.stop()


def dead_letters(records: list[Any]) -> list[tuple[str, bool]]:
    """(original_sha256, has a reason) of each dead letter; one that does not decode counts as
    another dead letter (not ours to judge here)."""
    from switchyard.v1.events_pb2 import DeadLetter

    out = []
    for r in records:
        try:
            d = DeadLetter.FromString(r.value or b"")
        except Exception:  # noqa: BLE001
            out.append(("", False))
            continue
        out.append((d.original_sha256, bool(d.reason and d.error_code)))
    return out


async def read_dlq(bootstrap: str, topic: str, want: set[str]) -> list[tuple[str, bool]]:
    """Every dead letter in `topic` from the start, without a group: (original_sha256, has a reason).
    Reads until all of `want` showed (or DLQ_WAIT_S), then DLQ_SETTLE_S more for repeats."""
    from tests.helpers.kafka import collect

    settle_until: float | None = None
    seen: set[str] = set()
    read = 0

    def settled(records: list[Any]) -> bool:
        nonlocal settle_until, read
        seen.update(sha for sha, _ in dead_letters(records[read:]))
        read = len(records)
        if settle_until is None and want <= seen:
            settle_until = time.monotonic() + DLQ_SETTLE_S
        return settle_until is not None and time.monotonic() >= settle_until

    return dead_letters(await collect(bootstrap, topic, 0, DLQ_WAIT_S + DLQ_SETTLE_S, until=settled))
