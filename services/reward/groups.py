"""Groups: from one finished group response to the records on sy.rewards (no Kafka here).

A group is the samples of one prompt, generated as ONE engine request with n = group size
(preprocess fans a job out that way), so all its samples reach the reward service in one
sy.responses record. Scoring a group is then one unit of work: score, compute the group's
statistics, publish n sample records + 1 group record, and only then commit the offset. A
SIGKILL at any point leaves either nothing published (the record is redelivered and scored
again: scoring is deterministic) or everything published (the restart's dedupe set, rebuilt
from sy.rewards, drops the redelivery). No partial group state lives in memory.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from switchyard.v1.envelope_pb2 import Choice, GroupResult, Response, RewardResult, Usage

from shared.adapters.refs import parse_ref
from shared.rewards import Sample, Scored, SpecItem, items_from_proto
from shared.runtime.envelope import Envelope, Kind

ADV_EPS = 1e-4  # as TRL's GRPO: keeps all-equal groups at advantage 0


def group_stats(rewards: Sequence[float], eps: float = ADV_EPS) -> tuple[float, float, list[float]]:
    """Mean, population std and GRPO advantages (r - mean) / (std + eps)."""
    if not rewards:
        return 0.0, 0.0, []
    mean = math.fsum(rewards) / len(rewards)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / len(rewards))
    return mean, std, [(r - mean) / (std + eps) for r in rewards]


def prompt_text(env: Envelope) -> str:
    """What the reward functions see as the prompt: the plain prompt, else the last user turn."""
    if env.request.prompt:
        return env.request.prompt
    for m in reversed(env.request.messages):
        if m.role == "user":
            return m.content or "".join(p.text for p in m.parts if p.type == "text")
    return ""


def samples_of(env: Envelope) -> list[Sample]:
    refs = dict(env.rollout.references)
    p = prompt_text(env)
    return [
        Sample(
            prompt=p,
            completion=c.text,
            references=refs,
            token_ids=tuple(c.token_ids),
            finish_reason=c.finish_reason,
        )
        for c in sorted(env.response.choices, key=lambda c: c.index)
    ]


def spec_items(env: Envelope) -> list[SpecItem]:
    return items_from_proto(env.rollout.reward_spec)


def policy_alias(env: Envelope) -> str:
    """The alias staleness is measured against: the one the caller named, else `latest`."""
    if env.rollout.policy_alias:
        return env.rollout.policy_alias
    requested = env.adapter_ref.requested or env.adapter
    if not requested:
        return ""
    try:
        _, _, alias = parse_ref(requested)
    except ValueError:
        return "latest"
    return alias or "latest"


# current(tenant, adapter name, alias) -> the version the alias points at now (None: unknown)
CurrentVersion = Callable[[str, str, str], Awaitable[int | None]]


async def staleness(env: Envelope, current: CurrentVersion) -> int:
    """Policy versions published since the sample's version, up to where its alias points now."""
    ref = env.adapter_ref
    alias = policy_alias(env)
    if not ref.name or not ref.version or not alias:
        return 0
    now = await current(env.tenant, ref.name, alias)
    return max(0, (now or ref.version) - ref.version)


def sample_request_id(group_request_id: str, sample_index: int) -> str:
    return f"{group_request_id}:s{sample_index}"


@dataclass
class GroupOutput:
    samples: list[Envelope]
    group: Envelope

    @property
    def all(self) -> list[Envelope]:
        return [*self.samples, self.group]


def _base(env: Envelope, request_id: str) -> Envelope:
    out = Envelope(
        request_id=request_id,
        tenant=env.tenant,
        kind=Kind.KIND_ROLLOUT,
        model=env.model,
        adapter=env.adapter,
        priority=env.priority,
        policy_version=env.policy_version,
        created_unix_ns=env.created_unix_ns,
    )
    out.adapter_ref.CopyFrom(env.adapter_ref)
    out.metadata.update(env.metadata)
    r = out.rollout
    src = env.rollout
    r.rollout_id, r.group_index, r.group_size = src.rollout_id, src.group_index, src.group_size
    r.num_groups, r.policy_alias, r.accepted_unix_ns = src.num_groups, policy_alias(env), src.accepted_unix_ns
    r.references.update(src.references)
    return out


def build_records(
    env: Envelope, scored: Sequence[Scored], stale: int, scoring_ms: float, now_ns: int | None = None
) -> GroupOutput:
    """n sample records (each with its reward and advantage) and the group record."""
    now_ns = now_ns or time.time_ns()
    rewards = [s.reward for s in scored]
    mean, std, adv = group_stats(rewards)
    choices = sorted(env.response.choices, key=lambda c: c.index)
    with_tokens = env.rollout.return_tokens or env.request.sampling.logprobs
    with_logprobs = env.request.sampling.logprobs
    samples = []
    for i, (c, s) in enumerate(zip(choices, scored, strict=True)):
        out = _base(env, sample_request_id(env.request_id, c.index))
        out.rollout.sample_index = c.index
        out.rollout.staleness = stale
        out.rollout.reward.CopyFrom(
            RewardResult(
                reward=s.reward, scores=s.scores, notes=s.notes, advantage=adv[i], scored_unix_ns=now_ns
            )
        )
        out.request.CopyFrom(env.request)
        choice = Choice(index=c.index, text=c.text, finish_reason=c.finish_reason)
        if with_tokens:
            choice.token_ids.extend(c.token_ids)
        if with_logprobs:
            choice.logprobs.extend(c.logprobs)
        out.response.CopyFrom(
            Response(
                choices=[choice],
                usage=Usage(
                    prompt_tokens=env.response.usage.prompt_tokens,
                    completion_tokens=len(c.token_ids),
                    total_tokens=env.response.usage.prompt_tokens + len(c.token_ids),
                ),
                pool=env.response.pool,
                worker=env.response.worker,
            )
        )
        samples.append(out)
    group = _base(env, env.request_id)
    group.rollout.staleness = stale
    accepted = env.rollout.accepted_unix_ns or env.created_unix_ns
    group.rollout.group.CopyFrom(
        GroupResult(
            mean=mean,
            std=std,
            size=len(rewards),
            rewards=rewards,
            advantages=adv,
            completion_ms=(now_ns - accepted) / 1e6 if accepted else 0.0,
            scoring_ms=scoring_ms,
        )
    )
    group.request.CopyFrom(env.request)
    group.response.usage.CopyFrom(env.response.usage)
    group.response.pool, group.response.worker = env.response.pool, env.response.worker
    group.timings.extend(env.timings)
    return GroupOutput(samples, group)


def error_record(env: Envelope) -> Envelope:
    """A group whose generation failed: the group record carries the error, no samples follow."""
    out = _base(env, env.request_id)
    out.error.CopyFrom(env.error)
    out.rollout.group.SetInParent()
    out.timings.extend(env.timings)
    return out
