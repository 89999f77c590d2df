"""Client-chosen ids are scoped by tenant along the whole pipeline (DESIGN §6, issue 33).

Two tenants (sk-a -> tenant-a, sk-b -> tenant-b) submit at the same time: (a) a rollout with the
same rollout_id, (b) async requests with the same request_id, and with the same Idempotency-Key,
(c) batch jobs from byte-identical input files. Every job completes, and each tenant gets the
answers to its own prompts (greedy copy tasks, which sy-tiny answers right: its build-time copy
accuracy is 1.0). Before the fix the second rollout stayed `queued` for good: the reward
service's dedupe set and the router's pending table were keyed by request id alone, and the two
jobs' groups share request ids (`ro-<rollout_id>:g<i>`).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from shared.rewards.tasks import check as checked
from tests.e2e.conftest import Pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

AUTH = {"tenant-a": {"Authorization": "Bearer sk-a"}, "tenant-b": {"Authorization": "Bearer sk-b"}}
# Each tenant's own prompts: an answer carrying the other tenant's word is someone else's.
WORDS = {"tenant-a": ["amber", "cabin", "delta"], "tenant-b": ["frost", "pixel", "ocean"]}
BATCH_WORDS = ["maple", "tiger", "lemon", "river"]
ROLLOUT_ID = "shared-step-1"
REQUEST_ID = "shared-job-1"
IDEM_KEY = "shared-key-1"
CHAT = "/v1/chat/completions"


def copy_prompt(word: str) -> str:
    return f"Repeat: {word}"


def right(prompt: str, text: str) -> bool:
    return checked("copy", prompt, text)


def rollout_body(tenant: str) -> dict[str, Any]:
    return {
        "policy": {"model": "sy-tiny"},
        "prompts": [{"messages": [{"role": "user", "content": copy_prompt(w)}]} for w in WORDS[tenant][:2]],
        "n": 2,
        # vLLM refuses n > 1 at temperature 0: top_k=1 samples the greedy answer n times.
        "sampling": {"temperature": 0.5, "top_k": 1, "max_tokens": 8},
        "reward": {"functions": [{"name": "task_check"}]},
        "rollout_id": ROLLOUT_ID,
    }


def async_body(word: str, request_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "endpoint": CHAT,
        "body": {
            "model": "sy-tiny",
            "messages": [{"role": "user", "content": copy_prompt(word)}],
            "max_tokens": 8,
            "temperature": 0,
        },
    }
    if request_id:
        body["request_id"] = request_id
    return body


# The same bytes from both tenants.
BATCH_FILE = b"".join(
    json.dumps(
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": CHAT,
            "body": {
                "model": "sy-tiny",
                "messages": [{"role": "user", "content": copy_prompt(w)}],
                "max_tokens": 8,
                "temperature": 0,
            },
        }
    ).encode()
    + b"\n"
    for i, w in enumerate(BATCH_WORDS)
)


async def _submit_all(url: str) -> dict[str, dict[str, Any]]:
    """Everything at once from both tenants; returns what each POST answered, per tenant."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:

        async def rollout(tenant: str) -> dict[str, Any]:
            r = await http.post("/rollouts", json=rollout_body(tenant), headers=AUTH[tenant])
            assert r.status_code == 202, r.text
            return r.json()

        async def by_request_id(tenant: str) -> dict[str, Any]:
            r = await http.post(
                "/requests", json=async_body(WORDS[tenant][0], REQUEST_ID), headers=AUTH[tenant]
            )
            assert r.status_code == 202, r.text
            return r.json()

        async def by_idempotency_key(tenant: str) -> dict[str, Any]:
            headers = {**AUTH[tenant], "Idempotency-Key": IDEM_KEY}
            r = await http.post("/requests", json=async_body(WORDS[tenant][2]), headers=headers)
            assert r.status_code == 202, r.text
            return r.json()

        async def batch(tenant: str) -> dict[str, Any]:
            f = await http.post(
                "/files",
                files={"file": ("input.jsonl", BATCH_FILE, "application/jsonl")},
                data={"purpose": "batch"},
                headers=AUTH[tenant],
            )
            assert f.status_code == 200, f.text
            b = await http.post(
                "/batches",
                json={"input_file_id": f.json()["id"], "endpoint": CHAT, "completion_window": "24h"},
                headers=AUTH[tenant],
            )
            assert b.status_code == 200, b.text
            return b.json()

        kinds = {
            "rollout": rollout,
            "request_id": by_request_id,
            "idem_key": by_idempotency_key,
            "batch": batch,
        }
        calls = [(kind, tenant) for kind in kinds for tenant in AUTH]
        results = await asyncio.gather(*(kinds[kind](tenant) for kind, tenant in calls))
        out: dict[str, dict[str, Any]] = {tenant: {} for tenant in AUTH}
        for (kind, tenant), res in zip(calls, results, strict=True):
            out[tenant][kind] = res
        return out


@pytest.fixture(scope="module")
def jobs(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    return asyncio.run(_submit_all(pipeline.base_url))


def test_the_same_ids_from_two_tenants_are_separate_jobs(jobs: dict[str, dict[str, Any]]) -> None:
    a, b = jobs["tenant-a"], jobs["tenant-b"]
    assert a["rollout"]["id"] == b["rollout"]["id"] == f"ro-{ROLLOUT_ID}"  # each tenant's own name
    assert a["request_id"]["id"] != b["request_id"]["id"]
    assert a["idem_key"]["id"] != b["idem_key"]["id"]
    assert a["batch"]["id"] != b["batch"]["id"] and a["batch"]["input_file_id"] != b["batch"]["input_file_id"]


def test_same_rollout_id_both_complete_with_their_own_answers(
    pipeline: Pipeline, jobs: dict[str, dict[str, Any]]
) -> None:
    url = pipeline.base_url
    deadline = time.monotonic() + 240
    done: dict[str, dict[str, Any]] = {}
    # Both tenants polled side by side: whichever job the bug stalls, the other is still seen.
    while time.monotonic() < deadline:
        for tenant in AUTH:
            if done.get(tenant, {}).get("status") in ("completed", "failed"):
                continue
            r = httpx.get(
                f"{url}/rollouts/{jobs[tenant]['rollout']['id']}",
                params={"samples": False, "wait": 2},
                headers=AUTH[tenant],
                timeout=60,
            )
            assert r.status_code == 200, r.text
            done[tenant] = r.json()
        if all(d.get("status") in ("completed", "failed") for d in done.values()) and len(done) == 2:
            break
    # Both first (a stuck second job is the bug), then what each holds.
    statuses = {t: d.get("status") for t, d in done.items()}
    assert statuses == {"tenant-a": "completed", "tenant-b": "completed"}, (done, pipeline.output())
    for tenant, headers in AUTH.items():
        full = httpx.get(
            f"{url}/rollouts/{jobs[tenant]['rollout']['id']}", headers=headers, timeout=30
        ).json()
        assert full["counts"] == {
            "groups_completed": 2,
            "groups_failed": 0,
            "samples": 4,
            "expected_samples": 4,
        }
        for g in full["groups"]:
            prompt = copy_prompt(WORDS[tenant][g["group_index"]])
            texts = [s["text"] for s in g["samples"]]
            assert len(texts) == 2 and all(right(prompt, t) for t in texts), (tenant, prompt, texts)
            assert all(s["scores"]["task_check"] == 1.0 for s in g["samples"]), g
    # A retry with the id is the tenant's same job, not a new one.
    again = httpx.post(url + "/rollouts", json=rollout_body("tenant-b"), headers=AUTH["tenant-b"], timeout=30)
    assert again.status_code == 202 and again.json()["status"] == "completed", again.text


def _wait_request(url: str, tenant: str, rid: str, deadline: float) -> dict[str, Any]:
    got: dict[str, Any] = {}
    while time.monotonic() < deadline:
        got = httpx.get(f"{url}/requests/{rid}", headers=AUTH[tenant], timeout=30).json()
        if got.get("status") != "queued":
            return got
        time.sleep(0.3)
    return got


@pytest.mark.parametrize("kind,word_index", [("request_id", 0), ("idem_key", 2)])
def test_same_async_request_id_both_complete_with_their_own_answers(
    pipeline: Pipeline, jobs: dict[str, dict[str, Any]], kind: str, word_index: int
) -> None:
    url = pipeline.base_url
    deadline = time.monotonic() + 180
    for tenant in AUTH:
        rid = jobs[tenant][kind]["id"]
        got = _wait_request(url, tenant, rid, deadline)
        assert got.get("status") == "completed", (tenant, got)
        text = got["result"]["choices"][0]["message"]["content"]
        assert right(copy_prompt(WORDS[tenant][word_index]), text), (tenant, text)
    # Each tenant's retry returns its own request.
    for tenant in AUTH:
        if kind == "request_id":
            r = httpx.post(
                url + "/requests",
                json=async_body(WORDS[tenant][0], REQUEST_ID),
                headers=AUTH[tenant],
                timeout=30,
            )
        else:
            headers = {**AUTH[tenant], "Idempotency-Key": IDEM_KEY}
            r = httpx.post(url + "/requests", json=async_body(WORDS[tenant][2]), headers=headers, timeout=30)
        assert r.status_code == 200 and r.json()["id"] == jobs[tenant][kind]["id"], r.text
    # Neither sees the other's.
    assert (
        httpx.get(f"{url}/requests/{jobs['tenant-a'][kind]['id']}", headers=AUTH["tenant-b"]).status_code
        == 404
    )


def test_identical_batch_inputs_both_complete_with_their_own_answers(
    pipeline: Pipeline, jobs: dict[str, dict[str, Any]]
) -> None:
    url = pipeline.base_url
    deadline = time.monotonic() + 240
    for tenant, headers in AUTH.items():
        bid = jobs[tenant]["batch"]["id"]
        b: dict[str, Any] = {}
        while time.monotonic() < deadline:
            b = httpx.get(f"{url}/batches/{bid}", headers=headers, timeout=30).json()
            if b["status"] in ("completed", "failed", "expired", "cancelled"):
                break
            time.sleep(0.3)
        assert b["status"] == "completed", (tenant, b)
        assert b["request_counts"] == {"total": 4, "completed": 4, "failed": 0}, b
        out = httpx.get(f"{url}/files/{b['output_file_id']}/content", headers=headers, timeout=30)
        rows = [json.loads(x) for x in out.text.splitlines() if x.strip()]
        assert sorted(r["custom_id"] for r in rows) == [f"line-{i}" for i in range(len(BATCH_WORDS))]
        for r in rows:
            assert r["error"] is None and bid in r["response"]["request_id"], r
            prompt = copy_prompt(BATCH_WORDS[int(r["custom_id"].split("-")[1])])
            text = r["response"]["body"]["choices"][0]["message"]["content"]
            assert right(prompt, text), (tenant, prompt, text)
        # The other tenant cannot read this batch or its output.
        other = AUTH["tenant-b" if tenant == "tenant-a" else "tenant-a"]
        assert httpx.get(f"{url}/batches/{bid}", headers=other, timeout=30).status_code == 404
        assert (
            httpx.get(f"{url}/files/{b['output_file_id']}/content", headers=other, timeout=30).status_code
            == 404
        )
