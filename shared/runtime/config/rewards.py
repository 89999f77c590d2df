"""The Rollouts and rewards section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class RewardSettings(Section):
    """RL rollouts and the reward service (issue 8, docs/rollouts.md)."""

    title: ClassVar[str] = "Rollouts and rewards"

    reward_triton_url: str | None = Field(
        default=None,
        description="Triton gRPC host:port of reward models (the reward_model function); unset = SY_TRITON_URL",
    )
    reward_policy_ttl_s: float = Field(
        default=1.0, ge=0, description="How long the reward service caches where a policy alias points"
    )
    reward_dedupe_capacity: int = Field(
        default=1_000_000, ge=1000, description="Published group ids the reward service remembers (dedupe)"
    )
    rollout_max_prompts: int = Field(default=1024, ge=1, description="Prompts in one rollout job")
