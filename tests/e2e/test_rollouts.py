"""RL rollouts end to end: POST /v1/rollouts -> preprocess fan-out -> vLLM (n per group) -> reward
service -> sy.rewards -> GET /v1/rollouts/{id}, with real peft policy adapters in the registry.

One pipeline for the module. The policy `pol` has v1 = a near-base adapter (sy-tiny's skills
intact) and v2 = a heavy random adapter (skills broken); `prod` points at v1 until the test
moves it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from shared.devstack.models.adapters import build_adapter
from shared.runtime.envelope import decode
from tests.e2e.conftest import Pipeline
from tests.helpers.kafka import collect

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

A = {"Authorization": "Bearer sk-a"}
WORDS = (
    "pilot",
    "cabin",
    "river",
    "stone",
    "maple",
    "tiger",
    "lemon",
    "ocean",
    "frost",
    "amber",
    "delta",
    "pixel",
)
REWARD = {
    "functions": [
        {"name": "task_check", "weight": 1.0},
        {"name": "regex", "weight": 0.25, "params": {"pattern": "^[a-z0-9]+$", "mode": "fullmatch"}},
        {"name": "length_penalty", "weight": 0.1, "params": {"target": 8, "limit": 16}},
    ]
}


def prompts(k: int, offset: int = 0) -> list[dict]:
    out = []
    for i in range(k):
        w = WORDS[(i + offset) % len(WORDS)]
        content = f"Repeat: {w}" if i % 2 == 0 else f"Reverse: {w}"
        out.append({"messages": [{"role": "user", "content": content}]})
    return out


@pytest.fixture(scope="module")
def rl(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    # Exact staleness (no alias cache) so the alias-move test can reason about each group.
    p = Pipeline(tmp_path_factory.mktemp("rollouts"), SY_REWARD_POLICY_TTL_S="0")
    try:
        p.wait_up()
        root = tmp_path_factory.mktemp("policy")
        good = build_adapter(model_dir, root / "good", seed=1, scale=0.01)
        bad = build_adapter(model_dir, root / "bad", seed=2, scale=0.6)
        r = upload(p, good, aliases="prod")
        assert r.status_code == 201 and r.json()["version"] == 1, r.text
        p.bad_adapter = bad  # type: ignore[attr-defined]
        yield p
    finally:
        p.stop()


def registry(p: Pipeline) -> str:
    return p.endpoints["services"]["registry"]["url"]


def upload(p: Pipeline, adapter_dir: Path, **form: str) -> httpx.Response:
    files = {
        "adapter_model": (
            "adapter_model.safetensors",
            (adapter_dir / "adapter_model.safetensors").read_bytes(),
        ),
        "adapter_config": ("adapter_config.json", (adapter_dir / "adapter_config.json").read_bytes()),
    }
    return httpx.post(
        registry(p) + "/v1/adapters", data={"name": "pol", **form}, files=files, headers=A, timeout=60
    )


def submit(p: Pipeline, body: dict) -> dict:
    r = httpx.post(p.base_url + "/rollouts", json=body, headers=A, timeout=60)
    assert r.status_code == 202, r.text
    return r.json()


def job(k: int, n: int, offset: int = 0, **extra: object) -> dict:
    return {
        "policy": {"model": "sy-tiny", "adapter": "pol@prod"},
        "prompts": prompts(k, offset),
        "n": n,
        "sampling": {"temperature": 0.8, "max_tokens": 12},
        "reward": REWARD,
        **extra,
    }


def get(p: Pipeline, rid: str, samples: bool = True) -> dict:
    r = httpx.get(p.base_url + f"/rollouts/{rid}", params={"samples": samples}, headers=A, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def wait(p: Pipeline, rid: str, pred, timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = get(p, rid, samples=False)
        if pred(got):
            return got
        time.sleep(0.2)
    raise AssertionError(f"rollout {rid} stuck at {got}\n{p.output()}")


def wait_done(p: Pipeline, rid: str, timeout_s: float = 300) -> dict:
    """Long poll (`?wait=`): the reply comes as soon as the gateway stored the job's last record."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = httpx.get(
            p.base_url + f"/rollouts/{rid}", params={"samples": False, "wait": 20}, headers=A, timeout=60
        )
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("completed", "failed"):
            return r.json()
    raise AssertionError(f"rollout {rid} not done\n{p.output()}")


def rewards_records(p: Pipeline, rollout_id: str) -> list:
    recs = asyncio.run(collect(p.endpoints["kafka"], "sy.rewards", 10**9, timeout_s=4))
    envs = [decode(r.value) for r in recs]
    return [e for e in envs if e.rollout.rollout_id == rollout_id]


def test_bad_rollout_requests_get_clear_errors(rl) -> None:
    for body, needle in (
        ({**job(1, 2), "reward": {"functions": [{"name": "nope"}]}}, "unknown function 'nope'"),
        ({**job(1, 2), "n": 99}, "n"),
        ({**job(1, 2), "policy": {"model": "sy-tiny", "adapter": "ghost@1"}}, "does not exist"),
        (
            {**job(1, 2), "prompts": [{"prompt": "x", "messages": [{"role": "user", "content": "y"}]}]},
            "exactly one",
        ),
    ):
        r = httpx.post(rl.base_url + "/rollouts", json=body, headers=A, timeout=30)
        assert r.status_code in (400, 404), r.text
        assert needle in r.json()["error"]["message"], r.text
    assert httpx.get(rl.base_url + "/rollouts/ro-none", headers=A).status_code == 404


def test_rollout_job_survives_a_reward_service_sigkill_without_duplicates(rl) -> None:
    # 48 × 4 samples: the engine runs 16 sequences at a time, so groups finish in waves and the
    # kill lands while most are still generating (16 prompts finished in one wave on a fast host).
    k, n = 48, 4
    body = job(k, n, return_tokens=True)
    # Copy/reverse may all earn full marks; 3-digit sums (sy-tiny's weak task) make rewards differ.
    body["prompts"][-1] = {"messages": [{"role": "user", "content": "What is 487+396?"}]}
    acc = submit(rl, body)
    rid = acc["id"]
    assert acc["num_groups"] == k and acc["group_size"] == n and acc["policy"]["version"] == "pol@1"
    # Kill the reward service as soon as the first groups are out, while the rest are generating.
    wait(rl, rid, lambda g: g["counts"]["groups_completed"] >= 1, timeout_s=180)
    pid = json.loads(rl.endpoints_path.read_text())["services"]["reward"]["pid"]
    os.kill(pid, signal.SIGKILL)
    at_kill = get(rl, rid, samples=False)["counts"]["groups_completed"]
    assert at_kill < k, "the job finished before the kill: make it longer"
    done = wait_done(rl, rid, timeout_s=300)
    assert done["status"] == "completed", done
    assert json.loads(rl.endpoints_path.read_text())["services"]["reward"]["pid"] != pid  # restarted
    assert done["counts"] == {
        "groups_completed": k,
        "groups_failed": 0,
        "samples": k * n,
        "expected_samples": k * n,
    }
    assert done["throughput"]["samples_per_s"] > 0 and done["throughput"]["tokens_per_s"] > 0

    # On the topic itself: exactly one record per sample and one group record per prompt.
    recs = rewards_records(rl, rid)
    ids = Counter(e.request_id for e in recs)
    assert [i for i, c in ids.items() if c > 1] == [], "duplicates on sy.rewards"
    groups = [e for e in recs if e.rollout.HasField("group")]
    samples = [e for e in recs if not e.rollout.HasField("group")]
    assert sorted(g.rollout.group_index for g in groups) == list(range(k))
    assert sorted((s.rollout.group_index, s.rollout.sample_index) for s in samples) == [
        (g, i) for g in range(k) for i in range(n)
    ]

    full = get(rl, rid)
    rewards = []
    for g in full["groups"]:
        assert [s["sample_index"] for s in g["samples"]] == list(range(n))
        got = [s["reward"] for s in g["samples"]]
        assert got == pytest.approx(g["rewards"])
        assert g["mean"] == pytest.approx(sum(got) / n)
        assert [s["advantage"] for s in g["samples"]] == pytest.approx(g["advantages"])
        for s in g["samples"]:
            assert (
                s["policy_version"] == "pol@1"
                and s["token_ids"]
                and set(s["scores"])
                == {
                    "task_check",
                    "regex",
                    "length_penalty",
                }
            )
        rewards += got
    assert any(r > 0 for r in rewards), "sy-tiny's copy/reverse skills should earn rewards"
    assert len(set(rewards)) > 1


def test_alias_move_mid_job_keeps_versions_and_tags_staleness(rl) -> None:
    k, n = 8, 4
    before = submit(rl, job(k, n, offset=3))
    r = upload(rl, rl.bad_adapter)  # pol v2: the heavy random adapter
    assert r.status_code == 201 and r.json()["version"] == 2, r.text
    move_start = time.time_ns()
    r = httpx.put(registry(rl) + "/v1/adapters/pol/aliases/prod", json={"version": 2}, headers=A, timeout=30)
    assert r.status_code == 200, r.text
    moved = time.time_ns()
    after = submit(rl, job(k, n, offset=3))
    assert before["policy"]["version"] == "pol@1" and after["policy"]["version"] == "pol@2"

    b = wait(rl, before["id"], lambda g: g["status"] == "completed")
    a = wait(rl, after["id"], lambda g: g["status"] == "completed")
    assert b["counts"]["samples"] == a["counts"]["samples"] == k * n
    b, a = get(rl, before["id"]), get(rl, after["id"])
    for g in b["groups"]:
        scored_ns = b["created"] * 1e9 + g["completion_ms"] * 1e6
        # In flight when the alias moved: still sampled from v1, tagged one version stale.
        assert g["policy_version"] == "pol@1"
        assert all(s["policy_version"] == "pol@1" for s in g["samples"])
        if scored_ns > moved + 5e6:
            assert g["staleness"] == 1 and all(s["staleness"] == 1 for s in g["samples"])
        elif scored_ns < move_start:
            assert g["staleness"] == 0
    for g in a["groups"]:
        assert g["policy_version"] == "pol@2" and g["staleness"] == 0
        assert all(s["policy_version"] == "pol@2" for s in g["samples"])
    # The two policies earn different rewards: v1 keeps sy-tiny's skills, v2 breaks them.
    mean_b = sum(g["mean"] for g in b["groups"]) / k
    mean_a = sum(g["mean"] for g in a["groups"]) / k
    assert mean_b > 0 and mean_b != pytest.approx(mean_a)
    assert mean_b > mean_a


def test_rollout_job_written_straight_to_kafka_as_json(rl) -> None:
    """Any Kafka producer may submit the job record (protobuf JSON mapping); GET reads its results."""
    from tests.helpers.kafka import produce

    rid = f"ro-kafka-{int(time.time())}"
    record = {
        "request_id": rid,
        "tenant": "tenant-a",
        "kind": "KIND_ROLLOUT",
        "model": "sy-tiny",
        "request": {"sampling": {"n": 2, "max_tokens": 8, "temperature": 0.5}},
        "rollout": {
            "rollout_id": rid,
            "prompts": [
                {
                    "messages": [{"role": "user", "content": "Repeat: pilot"}],
                    "references": {"answer": "pilot"},
                },
                {"prompt": "What is 2+3?", "references": {"answer": "5"}},
            ],
            "reward_spec": {"functions": [{"name": "exact_match"}, {"name": "numeric_match", "weight": 0.5}]},
        },
    }
    asyncio.run(
        produce(
            rl.endpoints["kafka"],
            "sy.requests",
            [json.dumps(record).encode()],
            headers=[("content-type", b"application/json")],
            keys=[rid.encode()],
        )
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = httpx.get(rl.base_url + f"/rollouts/{rid}", headers=A, timeout=30)
        if r.status_code == 200 and r.json()["status"] == "completed":
            break
        time.sleep(0.3)
    got = r.json()
    assert got["status"] == "completed", got
    assert got["counts"]["samples"] == 4 and got["policy"]["version"] == "sy-tiny"
    for g in got["groups"]:
        assert set(g["samples"][0]["scores"]) == {"exact_match", "numeric_match"}
    # Another tenant cannot read it.
    assert (
        httpx.get(rl.base_url + f"/rollouts/{rid}", headers={"Authorization": "Bearer sk-b"}).status_code
        == 404
    )
