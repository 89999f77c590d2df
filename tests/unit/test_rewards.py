"""Reward functions on known cases, the code sandbox against escape attempts, group statistics,
the reward records and the rollout fan-out."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from pathlib import Path

import pytest
from switchyard.v1.envelope_pb2 import Choice, RewardFunction, RolloutPrompt

from services.preprocess.rollouts import fan_out, group_request_id
from services.reward.groups import build_records, group_stats, samples_of, spec_items, staleness
from services.reward.scoring import Published, RewardStage, is_group_record
from shared.rewards import Sample, SpecItem, check_spec, default_functions, score_group
from shared.rewards.functions import extract_code, final_number
from shared.rewards.sandbox import Limits, run_python
from shared.runtime.envelope import Envelope, Kind, Priority, Rejected, validate

FNS = default_functions("127.0.0.1:1")


def run(coro):
    return asyncio.run(coro)


def score(name: str, completion: str, params: dict | None = None, **refs: str) -> float:
    s = Sample(prompt=refs.pop("prompt", ""), completion=completion, references=refs)
    return run(FNS[name].score([s], params or {}))[0].value


# ------------------------------------------------------------------------------ rule functions
def test_exact_match() -> None:
    assert score("exact_match", " 95<|eos|>", answer="95") == 1.0
    assert score("exact_match", "95.", answer="95") == 0.0
    assert score("exact_match", "Hello", {"case_sensitive": "false"}, answer="hello") == 1.0
    assert score("exact_match", "Hello", answer="hello") == 0.0
    assert score("exact_match", "x") == 0.0  # no reference: a failure, not an error


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 1,234.5.", 1234.5),
        ("-3 then 7", 7.0),
        ("no digits", None),
        ("x = .5", 0.5),
        ("1e3", 1000.0),
    ],
)
def test_final_number(text: str, expected: float | None) -> None:
    assert final_number(text) == expected


def test_numeric_match() -> None:
    assert score("numeric_match", "So 37+58 = 95", answer="95") == 1.0
    assert score("numeric_match", "95 or maybe 96", answer="95") == 0.0  # the final number counts
    assert score("numeric_match", "3.14159", {"tolerance": "0.01"}, answer="3.14") == 1.0
    assert score("numeric_match", "none", answer="95") == 0.0
    assert score("numeric_match", "2", {"value": "2"}) == 1.0  # a literal instead of a reference


def test_regex() -> None:
    assert score("regex", "Answer: 42", {"pattern": r"Answer: \d+"}) == 1.0
    assert score("regex", "Answer: 42!", {"pattern": r"Answer: \d+", "mode": "fullmatch"}) == 0.0
    assert score("regex", "ANSWER: 42", {"pattern": r"answer: \d+", "flags": "i"}) == 1.0
    # Catastrophic backtracking is cut off by the match timeout and scores 0.
    s = run(FNS["regex"].score([Sample("", "a" * 40 + "!")], {"pattern": r"^(a+)+$"}))[0]
    assert s.value == 0.0


def test_json_schema() -> None:
    schema = json.dumps(
        {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    )
    assert score("json_schema", '{"answer": 95}', {"schema": schema}) == 1.0
    assert score("json_schema", '```json\n{"answer": 95}\n```', {"schema": schema}) == 1.0
    assert score("json_schema", '{"answer": "95"}', {"schema": schema}) == 0.0
    assert score("json_schema", "{answer: 95", {"schema": schema}) == 0.0
    assert score("json_schema", '{"answer": 1}', {}, schema=schema) == 1.0  # schema as a reference


def test_length_penalty() -> None:
    fn = FNS["length_penalty"]
    p = {"target": "4", "limit": "8"}
    got = run(fn.score([Sample("", "", token_ids=range(n)) for n in (2, 4, 6, 8, 20)], p))
    assert [g.value for g in got] == [0.0, 0.0, -0.5, -1.0, -1.0]


def test_task_check_uses_the_synthetic_tasks() -> None:
    assert score("task_check", "95", prompt="What is 37+58?") == 1.0
    assert score("task_check", "94", prompt="What is 37+58?") == 0.0
    assert score("task_check", "tolip", prompt="Reverse: pilot") == 1.0


def test_spec_checks_name_the_problem() -> None:
    check_spec([SpecItem("numeric_match", 1.0, {})], FNS)
    for items, needle in (
        ([], "at least one"),
        ([SpecItem("nope", 1.0, {})], "unknown function 'nope'"),
        ([SpecItem("regex", 1.0, {})], "pattern"),
        ([SpecItem("regex", 1.0, {"pattern": "("})], "not a valid regular expression"),
        ([SpecItem("json_schema", 1.0, {"schema": '{"type": 5}'})], "not a valid JSON schema"),
        ([SpecItem("length_penalty", 1.0, {"target": "10", "limit": "5"})], "target < limit"),
        ([SpecItem("code_tests", 1.0, {"timeout_s": "600"})], "timeout_s"),
    ):
        with pytest.raises(ValueError, match=needle):
            check_spec(items, FNS)


def test_weighted_combination_and_per_function_scores() -> None:
    items = [
        SpecItem("numeric_match", 1.0, {}),
        SpecItem("regex", 0.5, {"pattern": r"^\d+$"}),
        SpecItem("regex", 0.25, {"pattern": "9"}),
    ]
    samples = [Sample("q", "95", {"answer": "95"}), Sample("q", "it is 94", {"answer": "95"})]
    got = run(score_group(samples, items, FNS))
    assert got[0].scores == {"numeric_match": 1.0, "regex#0": 1.0, "regex#1": 1.0}
    assert got[0].reward == pytest.approx(1.75)
    assert got[1].reward == pytest.approx(0.25)
    assert got[1].notes == {}


def test_reward_model_down_is_waited_for_not_zero() -> None:
    from shared.runtime.envelope import DependencyUnavailable

    items = [SpecItem("reward_model", 1.0, {"model": "rm", "timeout_s": "2"})]
    with pytest.raises(DependencyUnavailable) as ei:  # the bus waits; never a zero reward
        run(score_group([Sample("q", "a")], items, FNS))
    assert ei.value.dependency == "triton"


# ----------------------------------------------------------------------------------- sandbox
TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
GOOD = "def add(a, b):\n    return a + b\n"


def code_score(completion: str, **params: str) -> tuple[float, str]:
    s = Sample("write add", completion, {"tests": TESTS})
    got = run(FNS["code_tests"].score([s], {"timeout_s": "3", **params}))[0]
    return got.value, got.note


def test_code_tests_pass_and_fail() -> None:
    assert code_score("```python\ndef add(a, b):\n    return a + b\n```") == (1.0, "passed")
    value, note = code_score("def add(a, b):\n    return a - b\n")
    assert value == 0.0 and "AssertionError" in note
    assert extract_code("text\n```py\nx = 1\n```\nmore") == "x = 1\n"


def test_sandbox_infinite_loop_is_killed() -> None:
    value, note = code_score("def add(a, b):\n    while True:\n        pass\n")
    assert value == 0.0 and note == "timeout"


def test_sandbox_sleeping_code_is_killed_on_wall_clock() -> None:
    r = run(run_python("import time\ntime.sleep(60)", Limits(timeout_s=1)))
    assert not r.passed and r.timed_out and r.duration_s < 10


def test_sandbox_fork_bomb_is_contained() -> None:
    """RLIMIT_NPROC refuses the forks; the PID namespace takes every bomb process with it
    (tests/unit/test_sandbox.py shows each layer on its own)."""
    bomb = "import os\nwhile True:\n    os.fork()\n"
    r = run(run_python(bomb, Limits(timeout_s=10)))
    assert r.returncode == 1 and not r.timed_out, r.reason()  # refused, not timed out
    assert "BlockingIOError: [Errno 11] Resource temporarily unavailable" in r.stderr
    value, note = code_score(bomb + GOOD + TESTS)  # the note: the last line any bomb process wrote
    assert value == 0.0 and note.startswith("exit 1: "), note
    assert _sandbox_processes() == []
    for code in (  # shell bombs (dash: no ':' function name) left behind by a program that passes
        "import subprocess\nsubprocess.Popen(['sh', '-c', 'b(){ b|b& };b'])\n",
        "import os\nos.system('b(){ b|b& };b')\n",
    ):
        t0 = time.monotonic()
        assert code_score(code + GOOD + TESTS) == (1.0, "passed")  # not a timeout: contained
        assert time.monotonic() - t0 < 3
        assert _sandbox_processes() == []  # nothing of the bomb outlived its sandbox


def test_sandbox_write_outside_temp_is_refused(tmp_path: Path) -> None:
    target = Path("/tmp") / f"sy-escape-{uuid.uuid4().hex}"
    home = tmp_path / "victim.txt"
    for code, want in (
        # /tmp is the sandbox's own tmpfs: the write succeeds there and never reaches the host.
        (f"open({str(target)!r}, 'w').write('x')", "passed"),
        (f"import os\nos.close(os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT))", "passed"),
        (
            f"import pathlib\npathlib.Path({str(home)!r}).write_text('x')",
            f"exit 1: FileNotFoundError: [Errno 2] No such file or directory: {str(home)!r}",
        ),
        (
            f"import shutil\nshutil.copy('/usr/bin/true', {str(target.parent / 'true')!r})",
            "passed",
        ),
        (
            "open('/usr/sy-escape', 'w').write('x')",
            "exit 1: OSError: [Errno 30] Read-only file system: '/usr/sy-escape'",
        ),
    ):
        assert code_score(code + "\n" + GOOD) == (1.0 if want == "passed" else 0.0, want)
    assert not target.exists() and not home.exists() and not Path("/usr/sy-escape").exists()
    # Writing inside its own temp dir is fine.
    assert code_score("open('scratch.txt', 'w').write('x')\ndef add(a, b):\n    return a + b\n")[0] == 1.0


def test_sandbox_huge_output_is_cut() -> None:
    r = run(run_python("while True:\n    print('x' * 10000)", Limits(timeout_s=5, max_output_bytes=4096)))
    assert r.output_exceeded and not r.passed and len(r.stdout) <= 4096
    value, note = code_score("print('y' * 10_000_000)\ndef add(a, b):\n    return a + b\n")
    assert value == 0.0 and note == "output limit exceeded"


def test_sandbox_memory_and_network_are_limited() -> None:
    value, note = code_score(
        "x = bytearray(4 * 1024**3)\ndef add(a, b):\n    return a + b\n", memory_mb="256"
    )
    assert value == 0.0 and "MemoryError" in note
    value, note = code_score(
        "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)\ndef add(a, b):\n    return a + b\n"
    )
    assert (value, note) == (0.0, "exit 1: OSError: [Errno 101] Network is unreachable")


def test_sandbox_os_layers_hold_without_the_audit_hook() -> None:
    """No audit hook in the OS sandbox: the namespaces themselves contain what a program does."""
    probe = (
        "import os, socket\n"
        "print(os.getpid())\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=1); print('net-open')\n"
        "except OSError as e:\n"
        "    print('net-closed', e.errno)\n"
    )
    r = run(run_python(probe, Limits(timeout_s=10)))
    assert r.isolated, r.reason()
    lines = r.stdout.split()
    assert int(lines[0]) < 10  # PID namespace: bwrap's init is 1, so everything it forks dies with it
    assert lines[1:] == ["net-closed", "101"]  # ENETUNREACH: a network namespace without routes


def _sandbox_processes() -> list[int]:
    """Host processes under a sandbox uid (SY_SANDBOX_UID..+63 while the service is root)."""
    from shared.rewards.sandbox import UID_POOL, SandboxConfig

    base = SandboxConfig.from_settings().uid_base
    found = []
    for d in Path("/proc").iterdir():
        try:
            uid = int((d / "status").read_text().split("Uid:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        if base <= uid < base + UID_POOL:
            found.append(int(d.name))
    return found


# --------------------------------------------------------------------------------- groups
def test_group_stats_and_grpo_advantages() -> None:
    mean, std, adv = group_stats([1.0, 0.0, 1.0, 0.0])
    assert (mean, std) == (0.5, 0.5)
    a = 0.5 / (0.5 + 1e-4)
    assert adv == pytest.approx([a, -a, a, -a])
    assert sum(adv) == pytest.approx(0.0, abs=1e-9)
    mean, std, adv = group_stats([0.3, 0.3, 0.3])
    assert std == 0.0 and adv == [0.0, 0.0, 0.0]
    rewards = [0.1, 0.7, 0.2, 1.5, -0.4]
    mean, std, adv = group_stats(rewards)
    assert mean == pytest.approx(sum(rewards) / 5)
    assert std == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in rewards) / 5))
    assert adv == pytest.approx([(r - mean) / (std + 1e-4) for r in rewards])


def job(n: int = 3, prompts: tuple[str, ...] = ("What is 1+2?", "What is 2+2?")) -> Envelope:
    env = Envelope(
        request_id="ro-1", tenant="t", kind=Kind.KIND_ROLLOUT, model="sy-tiny", adapter="math@prod"
    )
    env.adapter_ref.name, env.adapter_ref.version, env.adapter_ref.requested = "math", 2, "math@prod"
    env.request.sampling.n = n
    env.request.sampling.temperature = 1.0
    env.rollout.rollout_id = "ro-1"
    env.rollout.group_size = n
    for p in prompts:
        env.rollout.prompts.append(
            RolloutPrompt(prompt=p, references={"answer": str(eval(p[8:-1]))})  # noqa: S307 - test data
        )
    env.rollout.reward_spec.functions.append(RewardFunction(name="numeric_match"))
    return env


def test_rollout_job_validates_and_fans_out_one_group_per_prompt() -> None:
    env = job()
    validate(env)  # a job has prompts instead of messages
    groups = fan_out(env, 100, FNS)
    assert [g.request_id for g in groups] == [group_request_id("ro-1", 0), group_request_id("ro-1", 1)]
    for i, g in enumerate(groups):
        validate(g)
        assert g.rollout.group_index == i and g.rollout.group_size == 3 and g.rollout.num_groups == 2
        assert g.request.sampling.n == 3  # one engine request samples the whole group
        assert g.priority == Priority.PRIORITY_ROLLOUT
        assert g.policy_version == "math@2" and g.adapter_ref.version == 2
        assert not g.rollout.prompts and g.rollout.references["answer"] == ("3", "4")[i]
        assert g.request.prompt == ("What is 1+2?", "What is 2+2?")[i]
    bad = job()
    bad.rollout.reward_spec.functions[0].name = "nope"
    with pytest.raises(Rejected, match="unknown function"):
        fan_out(bad, 100, FNS)
    with pytest.raises(Rejected, match="at most 1"):
        fan_out(job(), 1, FNS)
    empty = job()
    empty.rollout.ClearField("reward_spec")
    with pytest.raises(Rejected, match="reward function"):
        validate(empty)


def answered(group: Envelope, texts: list[str]) -> Envelope:
    env = Envelope()
    env.CopyFrom(group)
    for i, t in enumerate(texts):
        env.response.choices.append(
            Choice(index=i, text=t, finish_reason="stop", token_ids=[10 + i, 11], logprobs=[-0.5, -0.25])
        )
    env.response.usage.prompt_tokens = 7
    return env


async def _alias_at(version: int):
    async def current(tenant: str, name: str, alias: str) -> int | None:
        assert (tenant, name, alias) == ("t", "math", "prod")
        return version

    return current


def test_reward_stage_publishes_samples_then_group_and_dedupes() -> None:
    group = fan_out(job(), 100, FNS)[0]
    env = answered(group, ["3", "4", "the answer is 3"])

    async def main() -> None:
        stage = RewardStage(FNS, await _alias_at(3), Published())
        out = await stage.handle(env)
        assert out is not None and not isinstance(out, Envelope)
        assert [s.rollout.sample_index for s in out.samples] == [0, 1, 2]
        assert [s.rollout.reward.reward for s in out.samples] == [1.0, 0.0, 1.0]
        assert len({s.request_id for s in out.samples} | {out.group.request_id}) == 4
        g = out.group.rollout.group
        assert is_group_record(out.group) and not any(is_group_record(s) for s in out.samples)
        assert list(g.rewards) == [1.0, 0.0, 1.0] and g.mean == pytest.approx(2 / 3)
        assert [s.rollout.reward.advantage for s in out.samples] == pytest.approx(list(g.advantages))
        for rec in out.all:
            assert rec.policy_version == "math@2" and rec.rollout.staleness == 1  # alias moved to 3
            assert rec.rollout.policy_alias == "prod"
        # tokens and logprobs only when asked for
        assert not out.samples[0].response.choices[0].token_ids
        stage.published_ok(out)
        assert await stage.handle(env) is None  # a redelivery publishes nothing

        asked = answered(group, ["3", "4", "5"])
        asked.request_id = "other"
        asked.request.sampling.logprobs = True
        out2 = await stage.handle(asked)
        c = out2.samples[1].response.choices[0]
        assert list(c.token_ids) == [11, 11]
        assert list(c.logprobs) == [-0.5, -0.25]

    asyncio.run(main())


def test_staleness_counts_versions_behind_the_alias() -> None:
    env = fan_out(job(), 100, FNS)[0]

    async def main() -> None:
        assert await staleness(env, await _alias_at(2)) == 0
        assert await staleness(env, await _alias_at(5)) == 3
        base = Envelope()
        base.CopyFrom(env)
        base.ClearField("adapter_ref")
        base.adapter = ""
        assert await staleness(base, await _alias_at(5)) == 0

    asyncio.run(main())


def test_error_group_becomes_a_failed_group_record() -> None:
    env = fan_out(job(), 100, FNS)[1]
    env.error.code, env.error.message = "no_pool", "nobody serves it"

    async def main() -> None:
        out = await RewardStage(FNS, await _alias_at(2), Published()).handle(env)
        assert isinstance(out, Envelope) and is_group_record(out) and out.error.code == "no_pool"
        assert out.rollout.group_index == 1

    asyncio.run(main())


def test_records_round_trip_and_spec_items_default_weight() -> None:
    env = fan_out(job(), 100, FNS)[0]
    assert spec_items(env)[0].weight == 1.0
    env = answered(env, ["3", "3", "3"])
    samples = samples_of(env)
    assert [s.references["answer"] for s in samples] == ["3"] * 3
    out = build_records(env, run(score_group(samples, spec_items(env), FNS)), 0, 0.1)
    assert out.group.rollout.group.std == 0.0
    assert all(s.rollout.reward.advantage == 0.0 for s in out.samples)


def test_partly_published_group_republishes_only_what_is_missing() -> None:
    """A SIGKILL between acks: two sample records made it to sy.rewards, the group record did not."""
    env = answered(fan_out(job(), 100, FNS)[0], ["3", "4", "3"])

    async def main() -> None:
        published = Published()
        first = await RewardStage(FNS, await _alias_at(2), published).handle(env)
        for s in first.samples[:2]:
            published.add(s)  # what the restarted service read back from the topic
        again = await RewardStage(FNS, await _alias_at(2), published).handle(env)
        assert [s.rollout.sample_index for s in again.samples] == [2]
        assert again.group.request_id == env.request_id
        assert list(again.group.rollout.group.rewards) == list(first.group.rollout.group.rewards)

    asyncio.run(main())


def test_two_tenants_with_the_same_rollout_id_both_complete_with_their_own_answers(tmp_path: Path) -> None:
    """DESIGN §6: the rollout id is the client's, so two tenants' jobs share group and sample
    request ids; the reward dedupe set and the gateway's store keep them apart, and each tenant's
    own redelivery is still dropped."""
    from services.gateway.rollouts.store import RolloutStore

    def tenant_job(tenant: str, prompts: tuple[str, ...]) -> Envelope:
        env = job(prompts=prompts)
        env.tenant = tenant
        return env

    jobs = {"t": tenant_job("t", ("What is 1+2?", "What is 2+2?")), "u": tenant_job("u", ("What is 5+4?",))}
    answers = {"t": [["3", "3", "3"], ["4", "4", "5"]], "u": [["9", "8", "9"]]}

    async def any_tenant(tenant: str, name: str, alias: str) -> int | None:
        return 2

    async def main() -> tuple[dict[str, list[Envelope]], Published]:
        published = Published()
        stage = RewardStage(FNS, any_tenant, published)
        recs: dict[str, list[Envelope]] = {"t": [], "u": []}
        # Interleaved as they would arrive: t's group 0, u's group 0 (same request id), ...
        for gi in range(2):
            for tenant in ("t", "u"):
                prompts = tuple(p.prompt for p in jobs[tenant].rollout.prompts)
                groups = fan_out(tenant_job(tenant, prompts), 100, FNS)
                if gi >= len(groups):
                    continue
                g = answered(groups[gi], answers[tenant][gi])
                out = await stage.handle(g)
                assert out is not None and not isinstance(out, Envelope), (tenant, gi)
                assert {r.tenant for r in out.all} == {tenant}
                stage.published_ok(out)
                recs[tenant] += out.all
                assert await stage.handle(g) is None  # the tenant's own redelivery: dropped
        return recs, published

    recs, published = asyncio.run(main())
    assert recs["t"][0].request_id == recs["u"][0].request_id  # the ids do collide on the wire
    assert len(published) == len(recs["t"]) + len(recs["u"]) == 8 + 4

    # A restarted reward service rebuilds the set from sy.rewards: both tenants' records are in it.
    rebuilt = Published()
    for r in recs["t"] + recs["u"]:
        rebuilt.add(r)
    assert all(r in rebuilt for r in recs["t"] + recs["u"])
    other = Envelope()
    other.CopyFrom(recs["t"][0])
    other.tenant = "w"
    assert other not in rebuilt  # a third tenant's record under the same id is not a repeat

    store = RolloutStore(tmp_path / "r.sqlite")
    for env in jobs.values():
        env.rollout.num_groups, env.rollout.accepted_unix_ns = len(env.rollout.prompts), 1
        assert store.accept(env, {"model": "sy-tiny"})
        assert not store.accept(env, {})  # the tenant's own retry: the same job
    store.add_many(recs["t"] + recs["u"])
    for tenant in ("t", "u"):
        got = store.get(tenant, "ro-1")
        assert got is not None and got["status"] == "completed", got
        texts = [[s["text"] for s in g["samples"]] for g in got["groups"]]
        assert texts == answers[tenant]
    assert store.duplicates == 0


def test_gateway_rollout_store_counts_once_and_reports_status(tmp_path: Path) -> None:
    from services.gateway.rollouts.store import RolloutStore

    store = RolloutStore(tmp_path / "r.sqlite")
    job_env = job()
    job_env.rollout.num_groups, job_env.rollout.accepted_unix_ns = 2, 1
    assert store.accept(job_env, {"model": "sy-tiny", "version": "math@2"})
    assert not store.accept(job_env, {})  # same id: not a second job
    assert store.get("t", "ro-1")["status"] == "queued"
    assert store.get("other-tenant", "ro-1") is None

    async def outputs() -> list[Envelope]:
        stage = RewardStage(FNS, await _alias_at(2), Published())
        recs = []
        for i, g in enumerate(fan_out(job(), 100, FNS)):
            out = await stage.handle(answered(g, ["3", "4", str(i)]))
            recs += out.all
        return recs

    recs = asyncio.run(outputs())
    store.add_many(recs[:4])  # group 0 complete
    got = store.get("t", "ro-1")
    assert got["status"] == "in_progress" and got["counts"]["groups_completed"] == 1
    store.add_many(recs)  # everything, group 0 again (a redelivery)
    store.add_many(recs[4:])
    got = store.get("t", "ro-1")
    assert got["status"] == "completed" and store.duplicates == 4 + 4
    assert got["counts"] == {"groups_completed": 2, "groups_failed": 0, "samples": 6, "expected_samples": 6}
    assert [len(g["samples"]) for g in got["groups"]] == [3, 3]
    assert got["groups"][0]["samples"][0]["reward"] == 1.0
    assert store.get("t", "ro-1", with_samples=False).get("groups") is None

    failed = job()
    failed.request_id = failed.rollout.rollout_id = "ro-2"
    failed.error.code, failed.error.message = "invalid_request", "bad spec"
    store.add(failed)
    assert store.get("t", "ro-2")["status"] == "failed"
    assert store.get("t", "ro-2")["error"]["message"] == "bad spec"


def test_a_refused_kafka_job_without_rollout_id_still_completes_as_failed() -> None:
    env = Envelope(request_id="job-7", tenant="t", kind=Kind.KIND_ROLLOUT, model="sy-tiny")
    env.error.code, env.error.message = "invalid_request", "rollout.prompts[0] needs messages or a prompt"

    async def main() -> None:
        out = await RewardStage(FNS, await _alias_at(1), Published()).handle(env)
        assert isinstance(out, Envelope) and out.rollout.rollout_id == out.request_id == "job-7"
        assert out.error.code == "invalid_request"

    asyncio.run(main())


def test_gateway_rollout_wait_returns_when_the_last_record_is_stored(tmp_path: Path) -> None:
    """GET /v1/rollouts/{id}?wait=: held until the reader stores the group that completes the job."""
    from services.gateway.rollouts.store import RolloutStore

    store = RolloutStore(tmp_path / "r.sqlite")
    job_env = job()
    job_env.rollout.num_groups, job_env.rollout.accepted_unix_ns = 2, 1
    store.accept(job_env, {"model": "sy-tiny"})

    async def main() -> None:
        stage = RewardStage(FNS, await _alias_at(2), Published())
        recs = []
        for i, g in enumerate(fan_out(job(), 100, FNS)):
            recs += (await stage.handle(answered(g, ["3", "4", str(i)]))).all
        # Nothing arrives: the wait ends at its timeout with the status as it is.
        t0 = time.monotonic()
        got = await store.wait_done("t", "ro-1", 0.2)
        assert got is not None and got["status"] == "queued" and time.monotonic() - t0 >= 0.2
        assert await store.wait_done("t", "ro-missing", 5) is None  # unknown: at once

        async def reader() -> None:  # what RewardsReader.on_batch does: store, then notify
            await asyncio.sleep(0.1)
            store.add_many(recs[:4])
            store.notify({("t", "ro-1")})
            await asyncio.sleep(0.3)
            store.add_many(recs[4:])
            store.notify({("t", "ro-1")})

        task = asyncio.create_task(reader())
        t0 = time.monotonic()
        got = await store.wait_done("t", "ro-1", 10)
        waited = time.monotonic() - t0
        await task
        assert got is not None and got["status"] == "completed"
        assert 0.35 <= waited < 2, waited  # woke on the record that completed it, not on the first

    asyncio.run(main())


def test_reward_handler_waits_for_sy_rewards_and_skips_what_it_read(tmp_path: Path) -> None:
    """RewardHandler (services/reward/stage.py): nothing is handled before sy.rewards was read to
    its end; a group read back from it is not published again; a dead group completes once."""
    from types import SimpleNamespace

    from switchyard.v1.events_pb2 import DeadLetter

    from services.reward.stage import RewardHandler
    from shared.runtime.config import load_settings
    from shared.runtime.envelope import encode

    def record(env: Envelope) -> SimpleNamespace:
        return SimpleNamespace(value=encode(env), headers=[])

    async def main() -> None:
        registry = SimpleNamespace(resolve=None, aclose=None)
        caught_up = asyncio.Event()  # the follower's, set at the end of sy.rewards
        handler = RewardHandler(load_settings(var_dir=tmp_path), registry, caught_up)  # type: ignore[arg-type]
        handler.stage = RewardStage(FNS, await _alias_at(2), handler.published)
        groups = fan_out(job(), 100, FNS)
        env = answered(groups[0], ["3", "4", "5"])
        pending = asyncio.create_task(handler.handle(env))
        await asyncio.sleep(0.05)
        assert not pending.done()  # waits for the dedupe set
        earlier = await RewardStage(FNS, await _alias_at(2), Published()).handle(env)
        assert earlier is not None and not isinstance(earlier, Envelope)
        handler.on_rewards([record(e) for e in earlier.all])  # what a previous run published
        caught_up.set()
        assert await pending == [] and handler.caught_up.is_set()

        dead = record(groups[1])
        [out] = handler.on_dead(dead, DeadLetter(error_code="internal", reason="boom"))  # type: ignore[arg-type]
        assert out.topic == handler.rewards
        assert handler.on_dead(dead, DeadLetter(error_code="internal", reason="boom")) == []  # type: ignore[arg-type]

    asyncio.run(main())
