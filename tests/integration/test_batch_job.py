"""The batch job's state machine on real object stores (a local directory, and moto's S3 server
as production's MinIO stand-in), with the pipeline replaced by a loopback.

The loopback answers each sent envelope straight into the real Collector, so these tests cover
the job's own logic (resume from stored progress, dedupe, compaction, cancel, expiry) in
milliseconds; tests/e2e/test_batches.py runs the same job through the real pipeline.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer
from switchyard.v1.envelope_pb2 import Choice

from services.batch.collect import Collector
from services.batch.job import BatchJob
from shared.batches.store import BatchObject, BatchStore, read_jsonl
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.procs import free_port
from shared.runtime.storage import LocalStore, ObjectStore, S3Store

CHAT = "/v1/chat/completions"
_buckets = itertools.count()


def settings(tmp: Path, **kw: object) -> Settings:
    return Settings(var_dir=tmp, batch_lease_s=2, batch_max_in_flight=4, batch_cancel_grace_s=0.5, **kw)


async def known(tenant: str, model: str) -> bool:
    return model == "sy-tiny"


def body(i: int) -> dict:
    return {"model": "sy-tiny", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 2}


async def new_batch(store: BatchStore, n: int, bad: int = 0, window_s: int = 3600) -> BatchObject:
    rows = [{"custom_id": f"c{i}", "method": "POST", "url": CHAT, "body": body(i)} for i in range(n)]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows) + b"{bad\n" * bad
    f = await store.put_file("t", "in.jsonl", "batch", data)
    now = int(time.time())
    b = BatchObject(
        id=f"batch_{time.time_ns()}",
        endpoint=CHAT,
        input_file_id=f.id,
        completion_window="1h",
        created_at=now,
        expires_at=now + window_s,
    )
    await store.put_batch("t", b)
    return b


class Loopback:
    """Answers each envelope through the collector; `answer=False` swallows them (a stalled pipeline)."""

    def __init__(self, collector: Collector, crash_after: int | None = None, answer: bool = True) -> None:
        self.collector, self.crash_after, self.answer = collector, crash_after, answer
        self.sent: list[str] = []

    async def publish(self, envs: list[Envelope]) -> None:
        for env in envs:
            if self.crash_after is not None and len(self.sent) >= self.crash_after:
                raise RuntimeError("worker died")
            self.sent.append(env.request_id)
            if self.answer:
                reply = Envelope()
                reply.CopyFrom(env)
                reply.response.choices.append(Choice(index=0, text="ok", finish_reason="stop"))
                asyncio.get_running_loop().create_task(self.collector.handle(reply))


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["local", "s3"])
async def env(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("services.batch.job.REFRESH_S", 0.02)
    if request.param == "s3":
        objects: ObjectStore = S3Store(
            request.getfixturevalue("s3_endpoint"),
            f"sy-batch-{next(_buckets)}",
            access_key="testing",
            secret_key="testing",
            region="us-east-1",
        )
    else:
        objects = LocalStore(tmp_path / "objects")
    store = BatchStore(objects)
    collector = Collector(store, "test", window_s=0.01)
    stop = asyncio.Event()
    task = asyncio.create_task(collector.run(stop))
    yield tmp_path, store, collector
    stop.set()
    await task


async def output(store: BatchStore, file_id: str | None) -> list[dict]:
    return read_jsonl(await store.file_content("t", file_id) or b"") if file_id else []


async def test_resume_after_a_crash_keeps_every_line_once(env) -> None:
    tmp, store, collector = env
    s = settings(tmp)
    b = await new_batch(store, 30, bad=2)
    first = Loopback(collector, crash_after=10)
    with pytest.raises(RuntimeError):
        await BatchJob(s, store, first.publish, known).run("t", b.id)
    assert (await store.get_batch("t", b.id)).status == "in_progress"
    await asyncio.sleep(0.1)  # the collector stores what was answered
    second = Loopback(collector)
    assert await BatchJob(s, store, second.publish, known).run("t", b.id) == "completed"
    final = await store.get_batch("t", b.id)
    assert (final.request_counts.total, final.request_counts.completed, final.request_counts.failed) == (
        32,
        30,
        2,
    )
    out = await output(store, final.output_file_id)
    assert sorted(r["custom_id"] for r in out) == sorted(f"c{i}" for i in range(30))
    assert not set(first.sent) & set(second.sent)  # answered lines are not sent again
    errors = await output(store, final.error_file_id)
    assert [e["error"]["line"] for e in errors] == [31, 32]
    assert await store.active() == []
    assert len(await store.result_chunks(b.id)) <= 33  # compacted as it went


async def test_a_live_lease_keeps_a_second_worker_out(env) -> None:
    tmp, store, collector = env
    b = await new_batch(store, 3)
    await store.write_lease(b.id, "someone-else", 30)
    assert await BatchJob(settings(tmp), store, Loopback(collector).publish, known).run("t", b.id) == "busy"


async def test_cancel_and_expiry(env) -> None:
    tmp, store, collector = env
    s = settings(tmp)
    b = await new_batch(store, 20)
    stalled = Loopback(collector, answer=False)
    await store.request_cancel(b.id)
    assert await BatchJob(s, store, stalled.publish, known).run("t", b.id) == "cancelled"
    final = await store.get_batch("t", b.id)
    assert final.cancelled_at and final.cancelling_at and final.output_file_id is None

    b = await new_batch(store, 6, window_s=2)
    assert await BatchJob(s, store, stalled.publish, known).run("t", b.id) == "expired"
    final = await store.get_batch("t", b.id)
    errors = await output(store, final.error_file_id)
    assert len(stalled.sent) == 4  # nothing sent after the cancel; the window held the rest back
    assert {e["error"]["code"] for e in errors} == {"batch_expired"} and len(errors) == 6
