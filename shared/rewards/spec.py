"""A reward spec (weighted functions) checked at submission, and its weighted sum over a group."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.rewards.base import RewardFunction, RewardUnavailable, Sample, Score
from shared.runtime.envelope import DependencyUnavailable


@dataclass(frozen=True)
class SpecItem:
    name: str
    weight: float
    params: Mapping[str, str]

    @property
    def key(self) -> str:
        return self.name


def items_from_proto(spec: Any) -> list[SpecItem]:
    """A switchyard.v1.RewardSpec as SpecItems (weight unset = 1)."""
    return [
        SpecItem(f.name, f.weight if f.HasField("weight") else 1.0, dict(f.params)) for f in spec.functions
    ]


def score_keys(items: Sequence[SpecItem]) -> list[str]:
    """Score names: the function name, or name#i when a spec uses a function twice."""
    counts: dict[str, int] = {}
    for it in items:
        counts[it.name] = counts.get(it.name, 0) + 1
    seen: dict[str, int] = {}
    keys = []
    for it in items:
        if counts[it.name] == 1:
            keys.append(it.name)
        else:
            keys.append(f"{it.name}#{seen.get(it.name, 0)}")
            seen[it.name] = seen.get(it.name, 0) + 1
    return keys


def check_spec(items: Sequence[SpecItem], functions: Mapping[str, RewardFunction]) -> None:
    """Raise ValueError naming the first bad function of a reward spec."""
    if not items:
        raise ValueError("reward.functions must name at least one function")
    for i, it in enumerate(items):
        fn = functions.get(it.name)
        if fn is None:
            raise ValueError(
                f"reward.functions[{i}]: unknown function {it.name!r}; known: {sorted(functions)}"
            )
        if not math.isfinite(it.weight):
            raise ValueError(f"reward.functions[{i}]: weight must be finite")
        try:
            fn.check(it.params)
        except ValueError as exc:
            raise ValueError(f"reward.functions[{i}] ({it.name}): {exc}") from None


@dataclass
class Scored:
    reward: float
    scores: dict[str, float]
    notes: dict[str, str]


async def score_group(
    samples: Sequence[Sample], items: Sequence[SpecItem], functions: Mapping[str, RewardFunction]
) -> list[Scored]:
    """Every function over the group, then the weighted sum per sample.

    A function that fails on the input scores 0 for the whole group with the error as the note;
    `RewardUnavailable` (a scorer's service failed the call) and `DependencyUnavailable` (it is
    down: the bus waits for it) propagate, so the bus retries the group rather than publish
    rewards that are zero only because a server was away.
    """
    keys = score_keys(items)
    out = [Scored(0.0, {}, {}) for _ in samples]
    for key, it in zip(keys, items, strict=True):
        fn = functions[it.name]
        try:
            scores = await fn.score(samples, it.params)
        except (RewardUnavailable, DependencyUnavailable):
            raise
        except Exception as exc:  # noqa: BLE001 - see docstring
            scores = [Score(0.0, f"{type(exc).__name__}: {exc}"[:200])] * len(samples)
        for o, sc in zip(out, scores, strict=True):
            o.scores[key] = sc.value
            o.reward += it.weight * sc.value
            if sc.note:
                o.notes[key] = sc.note
    return out
