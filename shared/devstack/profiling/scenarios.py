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
    cache_hit_ratio: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of requests that send an answered request again exactly (model, adapter, max_tokens, media): what the cache can answer",
    )
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


# The flag that overrides each field (the others change only through a scenario of their own).
FLAGS: dict[str, str] = {
    "duration_s": "--duration",
    "rate_rps": "--rate",
    "concurrency": "--concurrency",
    "cache_hit_ratio": "--cache-hit-ratio",
    "adapter_mix": "--adapter-mix",
}


# The row of describe() that shows each field a flag can change.
ROW_OF: dict[str, str] = {
    "duration_s": "duration",
    "rate_rps": "load",
    "concurrency": "load",
    "mode": "load",
    "cache_hit_ratio": "cache_hit_ratio",
    "adapter_mix": "adapter_mix",
}


def load_text(sc: Scenario) -> str:
    """How the scenario sends: the one of rate and concurrency that is in force."""
    if sc.mode == "rate":
        return f"open loop, {sc.rate_rps:g} req/s (Poisson)"
    return f"closed loop, {sc.concurrency} in flight"


def _mix(mix: dict[str, float]) -> str:
    total = sum(mix.values())
    return ", ".join(f"{k or 'base model'} {v / total:.0%}" for k, v in mix.items())


def describe(sc: Scenario) -> dict[str, str]:
    """The scenario's settings as a user reads them (help text, report header, docs table)."""
    return {
        "load": load_text(sc),
        "duration": f"{sc.duration_s:g} s",
        "max_tokens": f"{sc.max_tokens[0]}-{sc.max_tokens[1]}",
        "filler words": f"{sc.prompt_words[0]}-{sc.prompt_words[1]}",
        "cache_hit_ratio": f"{sc.cache_hit_ratio:g}",
        "adapter_mix": _mix(sc.adapter_mix),
        "media_share": f"{sc.media_share:g}",
        "stream": "yes" if sc.stream else "no",
        "model": sc.model,
    }


def markdown_table() -> str:
    """Every named scenario's defaults as a Markdown table (docs/profiling.md holds this text)."""
    cols = list(describe(next(iter(SCENARIOS.values()))))
    lines = ["| scenario | " + " | ".join(cols) + " |", "|" + " --- |" * (len(cols) + 1)]
    for name, sc in SCENARIOS.items():
        lines.append(f"| `{name}` | " + " | ".join(describe(sc).values()) + " |")
    return "\n".join(lines)


def help_epilog() -> str:
    """The scenarios' defaults for `switchyard profile --help`."""
    rows = [
        f"  {name:<13} {d['load']}; {d['duration']}; max_tokens {d['max_tokens']}; "
        f"filler {d['filler words']} words; cache_hit_ratio {d['cache_hit_ratio']}; "
        f"adapters: {d['adapter_mix']}; model {d['model']}"
        for name, sc in SCENARIOS.items()
        for d in [describe(sc)]
    ]
    return "scenario defaults (flags override them):\n" + "\n".join(rows)
