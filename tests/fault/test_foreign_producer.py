"""A plain Kafka producer writes what users write to sy.requests: the whole stack stays quiet after.

1,000 malformed records (random bytes, truncated JSON, wrong types, a missing model, and 2 MB
fields in every place a producer can put them) beside 200 valid JSON envelopes, produced
straight to the ingest topic as any Kafka client would (issue 32). Then:
- each malformed record is in sy.dlq exactly once, with a reason;
- each valid one is answered exactly once;
- 30 s after the input stops, no stage writes anything new (heartbeats aside: workers send
  them by design);
- the embedded broker's RSS grows by less than 150 MiB over the whole test;
- the REST edge refuses the same oversized input with a 413 and a reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from switchyard.v1.events_pb2 import DeadLetter

from shared.runtime.bus import decode_record, header
from shared.runtime.procs import rss_bytes
from tests.e2e.conftest import Pipeline
from tests.helpers.kafka import collect, produce
from tests.helpers.reliability import record

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JS, PB = b"application/json", b"application/x-protobuf"
TWO_MB = 2 * 1024 * 1024
N_BAD, N_GOOD = 1000, 200


@pytest.fixture(scope="module")
def stack(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    # The cache on: its write-back reads sy.responses, where a dead letter's reply once looped.
    p = Pipeline(tmp_path_factory.mktemp("foreign"), SY_CACHE_ENABLED="true")
    try:
        p.wait_up()
        httpx.post(
            p.base_url + "/chat/completions",
            timeout=120,
            headers={"Authorization": "Bearer sk-a"},
            json={"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        yield p
    finally:
        p.stop()


def valid(i: int) -> dict:
    return {
        "request_id": f"good-{i}",
        "tenant": "tenant-a",
        "kind": "KIND_CHAT",
        "model": "sy-tiny",
        "request": {
            "messages": [{"role": "user", "content": f"Repeat: w{i}"}],
            "sampling": {"max_tokens": 4, "temperature": 0},
        },
    }


def malformed(rng: random.Random, i: int) -> tuple[str, bytes, bytes]:
    """(class, value, content type) of one bad record."""
    body = valid(i) | {"request_id": f"bad-{i}"}
    big = "x" * TWO_MB
    if i % 50 == 0:  # 20 records of 2 MB, the field rotating over every place a producer can fill
        field = ["content", "model", "request_id", "tenant", "metadata", "adapter", "stop", "user"][
            (i // 50) % 8
        ]
        if field == "content":
            body["request"]["messages"][0]["content"] = big
        elif field == "metadata":
            body["metadata"] = {"note": big}
        elif field == "stop":
            body["request"]["sampling"]["stop"] = [big]
        elif field == "user":
            body["request"]["user"] = big
        else:
            body[field] = big
        return f"huge_{field}", json.dumps(body).encode(), JS
    kind = rng.choice(["random", "truncated", "wrong_types", "missing_model", "not_object", "deep"])
    if kind == "random":
        return kind, rng.randbytes(rng.randint(1, 400)), rng.choice([JS, PB])
    if kind == "truncated":
        raw = json.dumps(body).encode()
        return kind, raw[: rng.randint(1, len(raw) - 1)], JS
    if kind == "wrong_types":
        field, value = rng.choice(
            [
                ("kind", 12345),
                ("tenant", {"a": 1}),
                ("request", {"messages": "not-a-list"}),
                ("priority", "urgent"),
                ("deadline_unix_ms", "tomorrow"),
            ]
        )
        body[field] = value
        return kind, json.dumps(body).encode(), JS
    if kind == "missing_model":
        body.pop("model")
        return kind, json.dumps(body).encode(), JS
    if kind == "not_object":
        return kind, json.dumps([body]).encode(), JS
    # Nesting deeper than any parser's default (each record its own bytes: matched by sha256).
    return kind, b'{"n": %d, "a":' % i + b'{"a":' * 5000 + b"1" + b"}" * 5001, JS


async def _ends(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Records in each topic (the embedded broker's end_offsets() is wrong: count by reading)."""
    out = {}
    for t in topics:
        out[t] = len(await collect(bootstrap, t, 0, timeout_s=3, until=lambda r: False))
    return out


async def test_a_foreign_producers_poison_is_dead_lettered_once_and_the_stack_goes_quiet(
    stack: Pipeline,
) -> None:
    ep = stack.endpoints
    bootstrap, url = ep["kafka"], ep["services"]["gateway"]["url"]
    rss_start = rss_bytes(ep["kafka_pid"]) or 0
    rng = random.Random(32)
    bad = [malformed(rng, i) for i in range(N_BAD)]
    good = [json.dumps(valid(i)).encode() for i in range(N_GOOD)]

    # The REST edge refuses the oversized request before anything is derived from it.
    r = httpx.post(
        url + "/v1/chat/completions",
        headers={"Authorization": "Bearer sk-a"},
        timeout=30,
        json={"model": "sy-tiny", "messages": [{"role": "user", "content": "x" * TWO_MB}], "max_tokens": 2},
    )
    assert r.status_code == 413 and "SY_MAX_RECORD_BYTES" in r.json()["error"]["message"], r.text

    # Valid records between every hundred bad ones, as one producer would send them.
    for start in range(0, N_BAD, 100):
        chunk = bad[start : start + 100]
        for ct in (JS, PB):
            values = [v for _, v, c in chunk if c == ct]
            if values:
                await produce(bootstrap, "sy.requests", values, headers=[("content-type", ct)])
        await produce(
            bootstrap, "sy.requests", good[start // 5 : start // 5 + 20], headers=[("content-type", JS)]
        )
    t_input_done = time.monotonic()

    dlq = await collect(bootstrap, "sy.dlq", N_BAD, timeout_s=240)
    want = {f"good-{i}" for i in range(N_GOOD)}

    def answered(recs: list) -> bool:  # type: ignore[type-arg]
        return want <= {r.key.decode(errors="replace") for r in recs if r.key}

    responses = await collect(bootstrap, "sy.responses", 0, timeout_s=300, until=answered)

    letters = [DeadLetter.FromString(r.value) for r in dlq]
    # Each malformed record once: the dead letters' hashes are the records' hashes, as a multiset
    # (two short cuts of JSON can be the same bytes, and then there are two of them).
    by_sha = Counter(d.original_sha256 for d in letters)
    sent = Counter(hashlib.sha256(value).hexdigest() for _, value, _ in bad)
    kind_of = {hashlib.sha256(value).hexdigest(): kind for kind, value, _ in bad}
    wrong = {
        kind_of.get(h, "unknown"): (by_sha[h], sent[h])
        for h in by_sha.keys() | sent.keys()
        if by_sha[h] != sent[h]
    }
    assert not wrong, f"(dead letters, records sent) by class: {wrong}"
    assert len(letters) == N_BAD
    for rec, d in zip(dlq, letters, strict=True):
        assert d.reason and d.error_code and d.stage == "preprocess", d.error_code
        assert len(rec.value) <= 70 * 1024, f"a dead letter of {len(rec.value)} bytes"
        assert header(rec.headers, "sy-error-reason") and header(rec.headers, "sy-error-code") == d.error_code
    huge = [d for d in letters if d.original_size >= TWO_MB]
    assert len(huge) == 20 and all(d.error_code == "record_too_large" and d.truncated for d in huge)

    good_answers = Counter()
    for rec in responses:
        assert len(rec.value) <= 1024 * 1024, f"a reply of {len(rec.value)} bytes"
        env = decode_record(rec)  # JSON requests get JSON replies
        if env.request_id in want:
            assert header(rec.headers, "content-type") == "application/json", rec.headers
            assert not env.error.code, env.error
            assert env.response.choices, env.request_id
            good_answers[env.request_id] += 1
    assert set(good_answers) == want and set(good_answers.values()) == {1}, good_answers.most_common(3)

    # Quiet: 30 s after the input stops, nothing new anywhere (heartbeats are periodic by design).
    watched = [
        "sy.requests",
        "sy.prepared",
        "sy.routing",
        "sy.infer.vllm",
        "sy.responses",
        "sy.stream",
        "sy.dlq",
        "sy.rewards",
    ]
    settle = max(0.0, 30 - (time.monotonic() - t_input_done))
    before = await _ends(bootstrap, watched)
    await asyncio.sleep(settle + 30)
    after = await _ends(bootstrap, watched)
    assert after == before, {t: after[t] - before[t] for t in watched if after[t] != before[t]}

    growth = (rss_bytes(ep["kafka_pid"]) or 0) - rss_start
    print(f"broker RSS grew {growth / 2**20:.1f} MiB")
    record(
        "foreign_producer",
        f"{N_BAD} malformed records (20 of 2 MB) and {N_GOOD} valid from a plain producer: each malformed one "
        f"dead-lettered once, each valid one answered once, nothing written in the 30 s after, broker RSS "
        f"+{growth / 2**20:.1f} MiB",
    )
    assert growth < 150 * 2**20, f"broker RSS grew {growth / 2**20:.1f} MiB"
    assert stack.proc.poll() is None
