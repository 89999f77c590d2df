"""Rollout jobs: one job record in, one group request per prompt out (RL serving, issue 8).

A group's samples go to the engine as ONE request with n = group size: the engine batches
them (shared prompt prefix, one scheduling decision), they reach one worker with the same
pinned policy version, and the reward service receives the whole group in one record, which
is what makes its scoring crash-safe without keeping partial groups (services/reward/groups.py).
The job's adapter was pinned before this runs, so every group of a job samples the same policy
version even when the alias moves while the job is in flight.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from shared.rewards import RewardFunction, check_spec, items_from_proto
from shared.runtime.envelope import Envelope, ErrorCode, Priority, Rejected


def policy_version(env: Envelope) -> str:
    """`name@version` of the pinned adapter, else the base model."""
    ref = env.adapter_ref
    return f"{ref.name}@{ref.version}" if ref.name and ref.version else env.model


def group_request_id(rollout_id: str, group_index: int) -> str:
    return f"{rollout_id}:g{group_index}"


def fan_out(env: Envelope, max_prompts: int, functions: Mapping[str, RewardFunction]) -> list[Envelope]:
    """The group requests of a rollout job (or the record itself, tagged, when it is one group)."""
    try:
        check_spec(items_from_proto(env.rollout.reward_spec), functions)
    except ValueError as exc:
        raise Rejected(ErrorCode.INVALID_REQUEST, str(exc)) from None
    r = env.rollout
    r.rollout_id = r.rollout_id or env.request_id
    r.accepted_unix_ns = r.accepted_unix_ns or env.created_unix_ns or time.time_ns()
    size = r.group_size or (env.request.sampling.n if env.request.sampling.HasField("n") else 1)
    env.priority = Priority.PRIORITY_ROLLOUT
    env.policy_version = env.policy_version or policy_version(env)
    if not r.prompts:
        r.group_size = size
        r.num_groups = r.num_groups or 1
        env.request.sampling.n = size
        return [env]
    if len(r.prompts) > max_prompts:
        raise Rejected(
            ErrorCode.INVALID_REQUEST,
            f"rollout has {len(r.prompts)} prompts; at most {max_prompts} (SY_ROLLOUT_MAX_PROMPTS)",
        )
    groups = []
    for i, p in enumerate(r.prompts):
        g = Envelope()
        g.CopyFrom(env)
        g.rollout.ClearField("prompts")
        g.request_id = group_request_id(r.rollout_id, i)
        g.rollout.group_index = i
        g.rollout.group_size = size
        g.rollout.num_groups = len(r.prompts)
        g.rollout.references.clear()
        g.rollout.references.update(p.references)
        g.request.ClearField("messages")
        g.request.messages.extend(p.messages)
        g.request.prompt = p.prompt
        g.request.sampling.n = size
        groups.append(g)
    return groups
