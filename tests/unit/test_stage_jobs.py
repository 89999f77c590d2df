"""Job headers: readers of a shared topic that want one kind of job pass over the rest undecoded."""

from __future__ import annotations

import asyncio

from aiokafka.structs import ConsumerRecord

from shared.runtime.bus import JOB_HEADER, header
from shared.runtime.envelope import Envelope, Kind, encode
from shared.runtime.stage import Emit, envelope_handler, job_of, out_record


def record(value: bytes, headers: list[tuple[str, bytes]]) -> ConsumerRecord:
    return ConsumerRecord(
        topic="sy.responses",
        partition=0,
        offset=0,
        timestamp=0,
        timestamp_type=0,
        key=b"k",
        value=value,
        checksum=None,
        serialized_key_size=1,
        serialized_value_size=len(value),
        headers=headers,
    )


def test_every_envelope_record_names_its_job() -> None:
    rollout = Envelope(request_id="r", kind=Kind.KIND_ROLLOUT)
    sample = Envelope(request_id="s", kind=Kind.KIND_CHAT)
    sample.rollout.rollout_id = "ro-1"
    batch = Envelope(request_id="b", kind=Kind.KIND_CHAT, batch_id="batch_1")
    single = Envelope(request_id="c", kind=Kind.KIND_CHAT)
    assert [job_of(e) for e in (rollout, sample, batch, single)] == ["rollout", "rollout", "batch", ""]
    for env, job in ((rollout, "rollout"), (batch, "batch"), (single, "")):
        rec = out_record(Emit("sy.responses", env))
        assert header(rec.headers, JOB_HEADER) == job


def test_a_stage_for_one_job_passes_over_the_others_and_reads_unlabelled_records() -> None:
    seen: list[str] = []

    async def handle(env: Envelope) -> list[Emit]:
        seen.append(env.request_id)
        return []

    on_record = envelope_handler("reward", handle, validate_input=False, jobs=("rollout",))
    records = []
    for rid, kind, batch_id in (
        ("chat", Kind.KIND_CHAT, ""),
        ("rollout", Kind.KIND_ROLLOUT, ""),
        ("batch", Kind.KIND_CHAT, "batch_1"),
    ):
        records.append(
            out_record(Emit("sy.responses", Envelope(request_id=rid, kind=kind, batch_id=batch_id)))
        )
    # Another producer's record without the header: decoded, as before headers existed.
    bare = Envelope(request_id="bare", kind=Kind.KIND_CHAT)

    async def run() -> None:
        for r in records:
            await on_record(record(r.value, list(r.headers)))
        await on_record(record(encode(bare), []))

    asyncio.run(run())
    assert seen == ["rollout", "bare"]
