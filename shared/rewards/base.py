"""The interface every reward function implements, and the param readers they share.

Kept apart from the functions themselves so the reward model (reward_model.py) and the
functions (functions.py) both build on it without importing each other.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from shared.rewards import tasks

Params = Mapping[str, str]


@dataclass(frozen=True)
class Sample:
    """One completion to score, with what the prompt's references say."""

    prompt: str
    completion: str
    references: Mapping[str, str] = field(default_factory=dict)
    token_ids: Sequence[int] = ()
    finish_reason: str = ""

    @property
    def answer_text(self) -> str:
        """The completion without end-of-turn markers or surrounding whitespace."""
        return tasks.clean(self.completion)


class RewardUnavailable(RuntimeError):
    """A scorer that depends on a service (the reward model) cannot answer now: retry the group."""


@dataclass(frozen=True)
class Score:
    value: float
    note: str = ""


class RewardFunction(ABC):
    name: ClassVar[str]

    def check(self, params: Params) -> None:  # noqa: B027 - optional hook
        """Raise ValueError naming what is wrong with `params`."""

    @abstractmethod
    async def score(self, samples: Sequence[Sample], params: Params) -> list[Score]: ...


class RuleFunction(RewardFunction):
    """A cheap per-sample function (microseconds): scored inline, no I/O."""

    @abstractmethod
    def score_one(self, sample: Sample, params: Params) -> Score: ...

    async def score(self, samples: Sequence[Sample], params: Params) -> list[Score]:
        return [self.score_one(s, params) for s in samples]


def float_param(params: Params, key: str, default: float) -> float:
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"param {key!r} must be a number, got {raw!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"param {key!r} must be finite")
    return v


def bool_param(params: Params, key: str, default: bool) -> bool:
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise ValueError(f"param {key!r} must be true or false, got {raw!r}")
