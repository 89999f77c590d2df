"""The pure parts of the soak's hostile traffic (loadtests/hostile.py) and of broker-capacity (issue 32): the generator
covers every class, the DLQ check matches what a stage's dead letter carries, and the doubling
detector stops at the right round."""

from __future__ import annotations

import json
import random

from aiokafka.structs import ConsumerRecord

from loadtests.broker_capacity import Round, doubled, doubling_round, mib_per_1000
from loadtests.hostile import (
    HOSTILE_CLASSES,
    HUGE_EVERY,
    HUGE_FIELD_BYTES,
    Hostile,
    dlq_verdict,
    envelope,
    hostile_record,
)
from shared.runtime.dead_letters import dead_letter
from shared.runtime.envelope import Rejected, decode, validate


def records(n: int) -> list[Hostile]:
    rng = random.Random(32)
    return [hostile_record(rng, i) for i in range(n)]


def consumed(value: bytes, offset: int) -> ConsumerRecord:
    return ConsumerRecord(
        topic="sy.requests",
        partition=0,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value),
        headers=[("content-type", b"application/json")],
    )


def test_the_generator_covers_every_class_with_unique_values() -> None:
    recs = records(2 * HUGE_EVERY)
    assert {r.kind for r in recs} == set(HOSTILE_CLASSES)
    huge = [r for r in recs if r.kind == "huge_field"]
    assert len(huge) == 2 and all(len(r.value) > HUGE_FIELD_BYTES for r in huge)
    assert all(len(r.value) < 64 * 1024 for r in recs if r.kind != "huge_field")
    assert len({r.sha256 for r in recs}) == len(recs), "two hostile records share a sha256"
    assert records(60) == recs[:60], "the same seed makes the same records"


def test_every_hostile_record_is_refused_by_the_ingest_decoder_and_the_template_is_not() -> None:
    env = decode(json.dumps(envelope("ok-1")).encode(), "application/json")
    validate(env)  # the valid template passes
    for r in records(HUGE_EVERY + 10):
        if r.kind == "huge_field":
            continue  # refused by size (record_too_large) before decoding
        try:
            validate(decode(r.value, r.content_type.decode()))
        except (Rejected, ValueError):
            continue
        raise AssertionError(f"{r.kind} record decoded as a valid request: {r.value[:120]!r}")
    missing = next(r for r in records(10) if r.kind == "missing_model")
    assert "model" not in json.loads(missing.value)


def test_the_dlq_check_matches_on_the_stages_own_dead_letter_sha256() -> None:
    recs = records(HUGE_EVERY + 5)
    letters = []
    for i, r in enumerate(recs):
        dl = dead_letter(consumed(r.value, i), "preprocess", "invalid_request", "bad", 1, 1024 * 1024)
        assert dl.original_sha256 == r.sha256
        letters.append((dl.original_sha256, bool(dl.reason and dl.error_code)))
    ok = dlq_verdict(recs, 0, letters)
    assert ok["passed"] and ok["dead_lettered_once"] == len(recs) and ok["other_dead_letters"] == 0
    assert sum(ok["by_class"].values()) == len(recs)

    twice = dlq_verdict(recs, 0, [*letters, letters[3]])
    assert not twice["passed"] and twice["dead_lettered_more_than_once"] == {recs[3].kind: 1}

    lost = dlq_verdict(recs, 0, letters[1:])
    assert not lost["passed"] and lost["missing_from_dlq"] == {recs[0].kind: 1}

    unexplained = dlq_verdict(recs, 2, [*letters, ("f" * 64, True)])
    assert unexplained["passed"] and unexplained["other_dead_letters"] == 1
    assert unexplained["sent"] == len(recs) + 2 and unexplained["refused_by_broker"] == 2

    no_reason = dlq_verdict(recs, 0, [(sha, i != 2) for i, (sha, _) in enumerate(letters)])
    assert not no_reason["passed"] and no_reason["without_reason"] == 1
    assert not dlq_verdict([], 0, [])["passed"], "a soak that sent nothing hostile proves nothing"


def rnd(i: int, rss: float, p50: float) -> Round:
    return Round(i, (i + 1) * 1050, 0, rss, p50, p50 * 2, 30.0)


def test_the_doubling_detector_stops_at_the_first_round_that_doubled() -> None:
    flat = [rnd(0, 40.0, 20.0), rnd(1, 55.0, 25.0), rnd(2, 79.9, 39.9)]
    assert doubling_round(flat) is None
    assert doubled(flat[0], flat[2]) == []

    by_rss = [*flat, rnd(3, 80.0, 21.0), rnd(4, 200.0, 50.0)]
    assert doubling_round(by_rss) == 3 and doubled(by_rss[0], by_rss[3]) == ["rss"]

    by_p50 = [*flat, rnd(3, 60.0, 40.0)]
    assert doubling_round(by_p50) == 3 and doubled(by_p50[0], by_p50[3]) == ["p50"]

    assert doubled(flat[0], rnd(5, 81.0, 41.0)) == ["rss", "p50"]
    assert doubling_round([rnd(0, 40.0, 20.0)]) is None, "the first round is the baseline"


def test_rss_per_1000_requests_is_the_slope_against_requests_sent() -> None:
    rows = [Round(i, 1000 * (i + 1), 0, 30.0 + 15.0 * i, 20.0, 30.0, 1.0) for i in range(4)]
    assert mib_per_1000(rows) == 15.0
    assert mib_per_1000(rows[:1]) is None
