"""Request and response bodies of /v1/rollouts, and the job envelope a request becomes."""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from switchyard.v1.envelope_pb2 import RewardFunction, RolloutPrompt

from shared.openai.format import chat_message
from shared.openai.protocol import ChatMessageIn
from shared.runtime.admission import estimate_tokens
from shared.runtime.envelope import MAX_MAX_TOKENS, Envelope, Kind, Priority


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RolloutPromptIn(_Strict):
    messages: list[ChatMessageIn] | None = Field(default=None, min_length=1)
    prompt: str | None = Field(default=None, min_length=1)
    references: dict[str, str] = Field(
        default_factory=dict, description="e.g. answer (exact/numeric match), tests (code_tests), schema"
    )

    @model_validator(mode="after")
    def _one_form(self) -> RolloutPromptIn:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("each prompt needs exactly one of messages or prompt")
        return self


class RewardFunctionIn(_Strict):
    name: str = Field(min_length=1, max_length=64)
    weight: float = Field(default=1.0, ge=-1e6, le=1e6, allow_inf_nan=False)
    params: dict[str, Any] = Field(default_factory=dict)

    def params_text(self) -> dict[str, str]:
        """Params travel as strings; structured values (a JSON schema) as JSON text."""
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in self.params.items()}


class RewardIn(_Strict):
    functions: list[RewardFunctionIn] = Field(min_length=1, max_length=16)


class PolicyIn(_Strict):
    model: str = Field(min_length=1, max_length=256, description="base model")
    adapter: str | None = Field(default=None, max_length=200, description="adapter name[@version|alias]")


class RolloutSampling(_Strict):
    temperature: float | None = Field(default=1.0, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1, lt=2**31)
    max_tokens: int = Field(default=64, ge=1, le=MAX_MAX_TOKENS)
    min_tokens: int | None = Field(default=None, ge=0, le=MAX_MAX_TOKENS)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    stop: list[str] | None = Field(default=None, max_length=4)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool = Field(default=False, description="return each sampled token's logprob (and token ids)")


class RolloutRequest(_Strict):
    policy: PolicyIn
    prompts: list[RolloutPromptIn] = Field(min_length=1)
    n: int = Field(default=4, ge=1, le=16, description="samples per prompt (the group size)")
    sampling: RolloutSampling = Field(default_factory=RolloutSampling)
    reward: RewardIn
    return_tokens: bool = Field(default=False, description="completion token ids on every sample")
    rollout_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]{1,80}$",
        description="idempotency key: a retry returns this rollout",
    )
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("metadata")
    @classmethod
    def _small(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > 16:
            raise ValueError("at most 16 metadata entries")
        return v


def rollout_cost(req: RolloutRequest) -> int:
    """Tokens a job may spend: per prompt its (estimated) prompt tokens once, plus max_tokens x n."""
    total = 0
    for p in req.prompts:
        text = p.prompt or "".join(m.content if isinstance(m.content, str) else "" for m in p.messages or [])
        total += estimate_tokens(len(text.encode())) + req.sampling.max_tokens * req.n
    return total


def to_job_envelope(req: RolloutRequest, rollout_id: str, tenant: str) -> Envelope:
    now = time.time_ns()
    env = Envelope(
        request_id=rollout_id,
        tenant=tenant,
        kind=Kind.KIND_ROLLOUT,
        model=req.policy.model,
        adapter=req.policy.adapter or "",
        priority=Priority.PRIORITY_ROLLOUT,
        created_unix_ns=now,
    )
    env.metadata.update(req.metadata)
    s = env.request.sampling
    s.n = req.n
    s.max_tokens = req.sampling.max_tokens
    s.logprobs = req.sampling.logprobs
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_tokens",
        "seed",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
    ):
        v = getattr(req.sampling, name)
        if v is not None:
            setattr(s, name, v)
    if req.sampling.stop:
        s.stop.extend(req.sampling.stop)
    r = env.rollout
    r.rollout_id, r.group_size, r.num_groups = rollout_id, req.n, len(req.prompts)
    r.accepted_unix_ns, r.return_tokens = now, req.return_tokens
    for p in req.prompts:
        rp = RolloutPrompt(prompt=p.prompt or "", references=p.references)
        if p.messages:
            rp.messages.extend(chat_message(m) for m in p.messages)
        r.prompts.append(rp)
    for f in req.reward.functions:
        r.reward_spec.functions.append(RewardFunction(name=f.name, weight=f.weight, params=f.params_text()))
    return env


# ----------------------------------------------------------------------------------- responses
class RolloutCounts(BaseModel):
    groups_completed: int
    groups_failed: int
    samples: int
    expected_samples: int


class RolloutThroughput(BaseModel):
    elapsed_s: float
    samples_per_s: float | None
    tokens_per_s: float | None
    completion_tokens: int


class RolloutSample(BaseModel):
    """One scored sample (store.py: sample_json)."""

    group_index: int
    sample_index: int
    text: str
    finish_reason: str
    reward: float
    scores: dict[str, float]
    advantage: float
    policy_version: str
    staleness: int
    completion_tokens: int
    notes: dict[str, str] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


class RolloutGroup(BaseModel):
    """One prompt's group with its rewards' statistics (store.py: group_json) and its samples."""

    group_index: int
    request_id: str
    policy_version: str
    staleness: int
    mean: float
    std: float
    rewards: list[float]
    advantages: list[float]
    completion_ms: float
    scoring_ms: float
    error: dict[str, str] | None = None
    samples: list[RolloutSample]


class Rollout(BaseModel):
    """GET /v1/rollouts/{id} (and the answer to POST, without groups)."""

    id: str
    object: Literal["rollout"]
    status: Literal["queued", "in_progress", "completed", "failed"]
    policy: dict[str, Any] | None
    created: float
    num_groups: int
    group_size: int
    counts: RolloutCounts
    throughput: RolloutThroughput
    error: dict[str, str] | None = None
    groups: list[RolloutGroup] | None = Field(default=None, description="with samples=true")
