"""The reward service process against the embedded broker: sy.rewards is read (its Follower caught
up) before the first group is handled, so a group a previous run published is not published
again after a redelivery, and a new group is."""

from __future__ import annotations

from pathlib import Path

from switchyard.v1.envelope_pb2 import Choice, RewardFunction, RolloutPrompt

from services.preprocess.rollouts import fan_out
from services.reward.scoring import Published, RewardStage
from shared.rewards import default_functions
from shared.runtime.envelope import Envelope, Kind, decode, encode
from tests.helpers.kafka import collect, produce, service_env, services

FNS = default_functions("127.0.0.1:1")


def answered_groups() -> list[Envelope]:
    """Two groups of a base-model job (no adapter: no registry call), answered."""
    job = Envelope(request_id="ro-9", tenant="t", kind=Kind.KIND_ROLLOUT, model="sy-tiny")
    job.request.sampling.n = 2
    job.rollout.rollout_id, job.rollout.group_size = "ro-9", 2
    for p, answer in (("What is 1+2?", "3"), ("What is 2+2?", "4")):
        job.rollout.prompts.append(RolloutPrompt(prompt=p, references={"answer": answer}))
    job.rollout.reward_spec.functions.append(RewardFunction(name="numeric_match"))
    out = []
    for g in fan_out(job, 100, FNS):
        g.response.choices.extend(Choice(index=i, text=t, finish_reason="stop") for i, t in enumerate("34"))
        out.append(g)
    return out


async def _no_alias(tenant: str, name: str, alias: str) -> int | None:
    return None


async def test_a_group_already_on_sy_rewards_is_not_published_again(broker, topics, var_dir: Path) -> None:
    first, second = answered_groups()
    earlier = await RewardStage(FNS, _no_alias, Published()).handle(first)
    assert earlier is not None and not isinstance(earlier, Envelope)
    rewards = f"{topics}rewards"
    await produce(broker.bootstrap, rewards, [encode(e) for e in earlier.all])  # a previous run's
    with services(["reward"], service_env(broker.bootstrap, topics, var_dir), var_dir):
        await produce(broker.bootstrap, f"{topics}responses", [encode(first), encode(second)])
        want = 2 * len(earlier.all)
        recs = await collect(broker.bootstrap, rewards, want, timeout_s=30)
        assert len(recs) == want
        extra = await collect(broker.bootstrap, rewards, want + 1, timeout_s=3)
    ids = [decode(r.value).request_id for r in extra]
    assert len(ids) == want == len(set(ids))  # nothing twice
    assert {e.request_id for e in earlier.all} < set(ids)
    assert second.request_id in ids  # the new group's record
