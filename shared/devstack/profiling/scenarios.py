"""Named load scenarios for `switchyard profile` (pydantic: a scenario file or flags override them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator


class Scenario(BaseModel):
    name: str
    mode: Literal["rate", "concurrency"] = "concurrency"
    rate_rps: float = Field(default=2.0, gt=0, description="Open loop: Poisson arrivals per second")
    concurrency: int = Field(default=4, ge=1, description="Closed loop: requests in flight")
    duration_s: float = Field(default=30.0, gt=0)
    prompt_words: tuple[int, int] = Field(default=(0, 0), description="Filler words added to each prompt")
    max_tokens: tuple[int, int] = (16, 64)
    adapter_mix: dict[str, float] = Field(
        default_factory=lambda: {"": 1.0}, description='model name ("" = the base model) or adapter -> weight'
    )
    cache_hit_ratio: float = Field(default=0.0, ge=0, le=1, description="Share of repeated prompts")
    media_share: float = Field(default=0.0, ge=0, le=1, description="Share of requests with an image")
    stream: bool = True
    model: str = "sy-tiny"
    seed: int = 7

    @model_validator(mode="after")
    def _ranges(self) -> Scenario:
        for lo, hi in (self.prompt_words, self.max_tokens):
            if lo > hi or lo < 0:
                raise ValueError(f"bad range ({lo}, {hi})")
        if not self.adapter_mix or sum(self.adapter_mix.values()) <= 0:
            raise ValueError("adapter_mix needs a positive weight")
        return self


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(name="smoke", duration_s=8, concurrency=2, max_tokens=(8, 16)),
        Scenario(name="interactive", mode="rate", rate_rps=4, duration_s=60, max_tokens=(16, 64)),
        Scenario(name="saturate", concurrency=16, duration_s=60, max_tokens=(32, 64)),
        Scenario(name="long-prompts", concurrency=4, duration_s=60, prompt_words=(200, 800)),
        Scenario(name="cache-heavy", mode="rate", rate_rps=4, duration_s=60, cache_hit_ratio=0.5),
    )
}
