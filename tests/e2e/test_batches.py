"""Batch jobs end to end with the official `openai` client: files, batches, cancel, a killed worker.

The whole pipeline runs through the launcher twice: once with Celery on the embedded SQLite
broker (the default) and once on a real Redis server.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.conftest import Pipeline
from tests.helpers.kafka import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CHAT = "/v1/chat/completions"
LINE_LIMIT = 4096


def line(custom_id: str, content: str = "reverse: abc", url: str = CHAT, model: str = "sy-tiny") -> dict:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": url,
        "body": {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 4},
    }


def jsonl(rows: list[dict | str]) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()


# "redis": the default, the embedded redis-server `switchyard up` starts (SY_CELERY_BROKER unset);
# "sqlite": the fallback where no redis-server exists, named explicitly.
@pytest.fixture(scope="module", params=["sqlite", "redis"])
def batch_pipeline(request: pytest.FixtureRequest, model_dir: Path, tmp_path_factory) -> Iterator[Pipeline]:
    # short: vLLM puts unix sockets under var/run (108-byte path limit)
    var = tmp_path_factory.mktemp(f"b{request.param[0]}")
    env = dict(
        # Small, slow-enough jobs: 10 lines/s and 4 in flight, so a cancel or a kill lands mid-job.
        SY_BATCH_RATE_PER_S="10",
        SY_BATCH_MAX_IN_FLIGHT="4",
        SY_BATCH_LEASE_S="3",
        SY_BATCH_SWEEP_INTERVAL_S="0.5",
        SY_BATCH_CANCEL_GRACE_S="5",
        SY_BATCH_LINE_MAX_BYTES=str(LINE_LIMIT),
    )
    if request.param == "sqlite":
        (var / "celery").mkdir(parents=True, exist_ok=True)
        env["SY_CELERY_BROKER"] = f"sqla+sqlite:///{var / 'celery' / 'broker.sqlite'}"
    p = Pipeline(var, **env)
    p.broker = request.param  # type: ignore[attr-defined]
    try:
        p.wait_up()
        if request.param == "redis":
            assert p.endpoints["redis"].startswith("redis://"), "the launcher started no redis-server"
        httpx.post(
            p.base_url + "/chat/completions",
            timeout=120,
            headers={"Authorization": "Bearer sk-a"},
            json={"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def client(batch_pipeline: Pipeline) -> openai.OpenAI:
    return openai.OpenAI(base_url=batch_pipeline.base_url, api_key="sk-a", max_retries=0, timeout=60)


def submit(client: openai.OpenAI, data: bytes) -> openai.types.Batch:
    f = client.files.create(file=("input.jsonl", io.BytesIO(data)), purpose="batch")
    return client.batches.create(
        input_file_id=f.id, endpoint=CHAT, completion_window="24h", metadata={"suite": "e2e"}
    )


def wait_for(client: openai.OpenAI, batch_id: str, pred, timeout_s: float = 120) -> openai.types.Batch:
    deadline = time.monotonic() + timeout_s
    while True:
        b = client.batches.retrieve(batch_id)
        if pred(b):
            return b
        assert time.monotonic() < deadline, f"batch stuck: {b}"
        time.sleep(0.2)


def final(b: openai.types.Batch) -> bool:
    return b.status in ("completed", "failed", "expired", "cancelled")


def read_lines(client: openai.OpenAI, file_id: str | None) -> list[dict]:
    if not file_id:
        return []
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines() if x.strip()]


def test_files_and_batches_with_bad_lines(client: openai.OpenAI, batch_pipeline: Pipeline) -> None:
    rows: list[dict | str] = [
        line("ok-1"),  # 1
        line("ok-2", "What is 12+30?"),  # 2
        '{"custom_id": "broken", "method": ',  # 3: bad JSON
        line("wrong-endpoint", url="/v1/completions"),  # 4
        line("unknown-model", model="no-such-model"),  # 5
        line("oversized", "x" * LINE_LIMIT),  # 6
        line("ok-7"),  # 7
        "",  # 8: blank, not a request
        line("ok-9", "reverse: planet"),  # 9
    ]
    b = submit(client, jsonl(rows))
    assert b.object == "batch" and b.status == "validating" and b.endpoint == CHAT
    assert b.metadata == {"suite": "e2e"}
    b = wait_for(client, b.id, final)
    assert b.status == "completed", b
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (8, 4, 4)
    assert b.in_progress_at and b.finalizing_at and b.completed_at and b.expires_at

    out = read_lines(client, b.output_file_id)
    assert sorted(r["custom_id"] for r in out) == ["ok-1", "ok-2", "ok-7", "ok-9"]
    for r in out:
        assert r["error"] is None and r["response"]["status_code"] == 200
        body = r["response"]["body"]
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant"
        assert 0 < body["usage"]["completion_tokens"] <= 4
        assert r["id"].startswith("batch_req_")

    errors = {r["error"]["line"]: r for r in read_lines(client, b.error_file_id)}
    assert sorted(errors) == [3, 4, 5, 6]
    assert errors[3]["error"]["code"] == "invalid_json"
    assert errors[4]["error"]["code"] == "mismatched_endpoint" and errors[4]["custom_id"] == "wrong-endpoint"
    assert (
        errors[5]["error"]["code"] == "model_not_found" and "no-such-model" in errors[5]["error"]["message"]
    )
    assert errors[6]["error"]["code"] == "line_too_large"
    for n, r in errors.items():
        assert f"line {n}" in r["error"]["message"]

    assert b.id in [x.id for x in client.batches.list(limit=100)]

    # Another tenant sees none of it: 404 for the batch, its files and its cancel.
    other = openai.OpenAI(base_url=batch_pipeline.base_url, api_key="sk-b", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(b.id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(b.output_file_id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(b.input_file_id)
    with pytest.raises(openai.NotFoundError):
        other.batches.cancel(b.id)
    assert b.id not in [x.id for x in other.batches.list()]

    # Bad requests get a reason.
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("x.jsonl", io.BytesIO(jsonl([line("a")]))), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        client.batches.create(
            input_file_id=b.input_file_id, endpoint="/v1/embeddings", completion_window="24h"
        )
    with pytest.raises(openai.NotFoundError):
        client.batches.create(input_file_id="file-nope", endpoint=CHAT, completion_window="24h")
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(b.id)  # already completed


def test_cancel_mid_job(client: openai.OpenAI) -> None:
    n = 40
    b = submit(client, jsonl([line(f"c-{i}") for i in range(n)]))
    wait_for(client, b.id, lambda x: x.request_counts.completed >= 2 or final(x))
    c = client.batches.cancel(b.id)
    assert c.status in ("cancelling", "cancelled") and c.cancelling_at
    b = wait_for(client, b.id, final, timeout_s=60)
    assert b.status == "cancelled" and b.cancelled_at, b
    assert 2 <= b.request_counts.completed < n, b.request_counts
    out = read_lines(client, b.output_file_id)
    ids = [r["custom_id"] for r in out]
    assert len(ids) == len(set(ids)) == b.request_counts.completed


def test_worker_sigkill_mid_job_every_line_once(client: openai.OpenAI, batch_pipeline: Pipeline) -> None:
    n = 40
    b = submit(client, jsonl([line(f"k-{i}", f"reverse: w{i}") for i in range(n)]))
    pid_file = batch_pipeline.var_dir / "run" / "batch-worker-batch-1.pid"
    wait_for(client, b.id, lambda x: x.request_counts.completed >= 5 or final(x))
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGKILL)
    killed_at = client.batches.retrieve(b.id).request_counts.completed
    assert killed_at < n, "the job ended before the kill; make it longer"
    b = wait_for(client, b.id, final, timeout_s=180)
    assert b.status == "completed", b
    assert int(pid_file.read_text()) != pid  # the batch service restarted its worker
    assert (b.request_counts.completed, b.request_counts.failed) == (n, 0)
    out = read_lines(client, b.output_file_id)
    ids = [r["custom_id"] for r in out]
    assert sorted(ids) == sorted(f"k-{i}" for i in range(n))  # every line, exactly once
    assert all(r["response"]["status_code"] == 200 for r in out)


def test_cli_submit_wait(batch_pipeline: Pipeline, tmp_path: Path) -> None:
    if batch_pipeline.broker != "sqlite":  # type: ignore[attr-defined]
        pytest.skip("the CLI is broker-independent; once is enough")
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl([line(f"cli-{i}") for i in range(3)]))
    out = tmp_path / "out.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "shared.devstack.cli", "batch", "submit", str(src), "--wait", "--poll", "0.2"]
        + ["--base-url", batch_pipeline.base_url, "--api-key", "sk-a", "--output", str(out)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("SY_")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "completed"
    assert "line" in r.stderr  # the progress bar
    assert sorted(json.loads(x)["custom_id"] for x in out.read_text().splitlines()) == [
        "cli-0",
        "cli-1",
        "cli-2",
    ]
