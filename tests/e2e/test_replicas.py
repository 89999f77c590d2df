"""Scale-out end to end (issue 37): two gateways, two preprocess, two cache and two vLLM workers.

`switchyard up` starts one of each; the test starts a second replica of each as the launcher's
own child is started (its environment, another instance id and health port), on the same broker
(4 partitions per topic), Redis, Milvus and object store. Then requests and polls alternate
replicas, retries land on the other one, a tenant's rate limit holds across both, and a gateway
SIGKILLed mid-load loses no accepted request and leaves no stream hanging.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from loadtests.harness.replicas import Replica, counter
from tests.e2e.conftest import Pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

A = {"Authorization": "Bearer sk-a"}
B = {"Authorization": "Bearer sk-b"}
RATE_B = 2.0  # tenant-b's requests/s, counted over SY_GATEWAY_RATE_BURST_S=2: 4 per window


@pytest.fixture(scope="module")
def stack(
    model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Pipeline, dict[str, Replica]]]:
    p = Pipeline(
        tmp_path_factory.mktemp("rep"),
        SY_CACHE_ENABLED="true",
        SY_TOPIC_PARTITIONS="4",  # `switchyard up` makes one per topic: replicas need more
        SY_GATEWAY_RATE_LIMITS=json.dumps({"tenant-b": RATE_B}),
        SY_GATEWAY_RATE_BURST_S="2",
        SY_GATEWAY_RESUBMIT_AFTER_S="30",
        SY_GATEWAY_RESUBMIT_INTERVAL_S="2",
    )
    replicas: dict[str, Replica] = {}
    try:
        p.wait_up()
        assert p.endpoints["redis"].startswith("redis://"), "the launcher started no Redis"
        for service in ("gateway", "preprocess", "cache", "vllm_worker"):
            replicas[service] = Replica(p.endpoints, p.var_dir, service)
        # Ready: a gateway's reply reader reads; a stage replica has partitions of its group.
        for r in replicas.values():
            r.wait_ready()
        # Warm both gateways: the first request also waits for the consumer groups to settle.
        for base in (p.base_url, replicas["gateway"].url + "/v1"):
            httpx.post(
                base + "/chat/completions",
                timeout=180,
                headers=A,
                json={"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            )
        yield p, replicas
    finally:
        for r in replicas.values():
            r.stop()
        p.stop()
        keep = os.environ.get("SY_TEST_KEEP_LOGS")
        if keep:
            for r in replicas.values():
                shutil.copy(r.log, Path(keep) / r.log.name)
            shutil.copy(p.log_path, Path(keep) / "up.log")


def bases(stack: tuple[Pipeline, dict[str, Replica]]) -> tuple[str, str]:
    p, replicas = stack
    return p.base_url, replicas["gateway"].url + "/v1"


def poll(base: str, rid: str, headers: dict[str, str], timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = httpx.get(f"{base}/requests/{rid}", headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        if r.json()["status"] != "queued":
            return r.json()
        time.sleep(0.3)
    raise AssertionError(f"request {rid} still queued after {timeout_s} s")


def chat(word: str) -> dict:
    return {
        "model": "sy-tiny",
        "messages": [{"role": "user", "content": f"Reverse: {word}"}],
        "max_tokens": 12,
    }


def test_async_request_on_one_replica_is_read_and_retried_on_the_other(stack) -> None:
    ga, gb = bases(stack)
    own = f"job-{uuid.uuid4().hex[:8]}"
    r = httpx.post(f"{ga}/requests", headers=A, json={"request_id": own, "body": chat("pilot")}, timeout=30)
    assert r.status_code == 202, r.text
    rid = r.json()["id"]
    done = poll(gb, rid, A)  # polled on the other replica
    assert done["status"] == "completed", done
    assert done["result"]["choices"][0]["message"]["content"].strip()
    # The retry lands on B: the same request, not a second one; and B finds it by the client's id.
    again = httpx.post(
        f"{gb}/requests", headers=A, json={"request_id": own, "body": chat("pilot")}, timeout=30
    )
    assert again.status_code == 200 and again.json()["id"] == rid, again.text
    assert httpx.get(f"{gb}/requests/{own}", headers=A, timeout=30).json()["id"] == rid
    # Another tenant sees neither id.
    assert httpx.get(f"{gb}/requests/{rid}", headers=B, timeout=30).status_code == 404
    assert httpx.get(f"{ga}/requests/{own}", headers=B, timeout=30).status_code == 404


def test_each_gateway_reads_its_own_replies_only(stack) -> None:
    """Replies go to the partition the requesting replica reads (reply_to): B reads none of A's."""
    p, replicas = stack
    ga, gb = bases(stack)
    name = "sy_gateway_reply_records_read_total"
    before_a, before_b = (
        counter(p.endpoints["services"]["gateway"]["url"], name),
        counter(replicas["gateway"].url, name),
    )
    for i in range(12):
        r = httpx.post(
            f"{ga}/chat/completions", headers=A, json={**chat(f"own{i}"), "stream": True}, timeout=60
        )
        assert r.status_code == 200, r.text
    time.sleep(1)
    read_a = counter(p.endpoints["services"]["gateway"]["url"], name) - before_a
    read_b = counter(replicas["gateway"].url, name) - before_b
    assert read_a >= 24, read_a  # 12 final replies and at least one delta record each
    assert read_b == 0, read_b


def test_a_rollout_created_on_one_replica_is_waited_on_from_the_other(stack) -> None:
    ga, gb = bases(stack)
    body = {
        "policy": {"model": "sy-tiny"},
        "prompts": [{"messages": [{"role": "user", "content": f"Repeat: {w}"}]} for w in ("amber", "frost")],
        "n": 2,
        "sampling": {"temperature": 0.8, "max_tokens": 8},
        "reward": {"functions": [{"name": "task_check", "weight": 1.0}]},
    }
    r = httpx.post(f"{ga}/rollouts", headers=A, json=body, timeout=60)
    assert r.status_code == 202, r.text
    rid = r.json()["id"]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        got = httpx.get(f"{gb}/rollouts/{rid}", params={"samples": False, "wait": 20}, headers=A, timeout=60)
        assert got.status_code == 200, got.text
        if got.json()["status"] not in ("queued", "running"):
            break
    assert got.json()["status"] == "completed", got.json()
    assert got.json()["counts"]["groups_completed"] == 2


def test_a_batch_created_on_one_replica_is_cancelled_on_the_other(stack) -> None:
    ga, gb = bases(stack)
    ca = openai.OpenAI(base_url=ga, api_key="sk-a", max_retries=0, timeout=60)
    cb = openai.OpenAI(base_url=gb, api_key="sk-a", max_retries=0, timeout=60)
    lines = "".join(
        json.dumps(
            {"custom_id": f"c-{i}", "method": "POST", "url": "/v1/chat/completions", "body": chat(f"w{i}")}
        )
        + "\n"
        for i in range(200)
    ).encode()
    f = ca.files.create(file=("in.jsonl", lines), purpose="batch")
    b = ca.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert cb.batches.retrieve(b.id).id == b.id  # B sees A's batch
    c = cb.batches.cancel(b.id)
    assert c.status in ("cancelling", "cancelled"), c
    deadline = time.monotonic() + 120
    while (got := ca.batches.retrieve(b.id)).status != "cancelled":
        assert time.monotonic() < deadline, got
        time.sleep(0.5)
    assert got.request_counts.completed < 200


def test_a_tenants_rate_limit_holds_across_two_replicas(stack) -> None:
    """tenant-b may send 2 requests/s over a 2 s window: 4 at once in all, not 4 per replica."""
    ga, gb = bases(stack)
    time.sleep(4.5)  # two empty windows: the sliding window counts the last one too

    def send(i: int) -> tuple[str, int]:
        base = (ga, gb)[i % 2]
        r = httpx.post(
            f"{base}/chat/completions", headers=B, json={**chat(f"r{i}"), "max_tokens": 1}, timeout=60
        )
        return base, r.status_code

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(send, range(16)))
    codes = [c for _, c in results]
    assert set(codes) <= {200, 429}, codes
    admitted = codes.count(200)
    assert 1 <= admitted <= 5, results  # limited per replica, 8 would pass
    assert {b for b, c in results if c == 429} == {ga, gb}, results


def test_a_gateway_killed_mid_load_loses_no_accepted_request_and_its_streams_end(stack) -> None:
    p, replicas = stack
    ga, gb = bases(stack)
    accepted: list[str] = []
    for i in range(16):
        base = (ga, gb)[i % 2]
        r = httpx.post(
            f"{base}/requests", headers=A, json={"body": chat(f"k{i}x{uuid.uuid4().hex[:4]}")}, timeout=30
        )
        assert r.status_code == 202, r.text
        accepted.append(r.json()["id"])

    # A stream held by B, cut by B's SIGKILL: the client sees an error, nothing hangs.
    seen: dict[str, object] = {}

    def stream() -> None:
        body = {**chat("streamer"), "max_tokens": 400, "stream": True, "min_tokens": 400}
        try:
            with httpx.stream("POST", f"{gb}/chat/completions", headers=A, json=body, timeout=60) as r:
                for _ in r.iter_lines():
                    seen.setdefault("first", time.monotonic())
            seen["end"] = "clean"
        except httpx.HTTPError as exc:
            seen["end"] = exc

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while "first" not in seen and "end" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "first" in seen, seen
    replicas["gateway"].kill()
    t.join(timeout=30)
    assert not t.is_alive(), "the stream hung after its gateway died"
    assert isinstance(seen["end"], httpx.HTTPError), seen

    # Every accepted request is answered and readable from the survivor.
    for rid in accepted:
        assert poll(ga, rid, A, timeout_s=240)["status"] == "completed", rid
