"""Training data for the local models: seeded samples of the checkable tasks of
shared/rewards/tasks.py, deterministic for a seeded `random.Random`; no torch here."""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shared.rewards.tasks import ANSWERS, TASKS, check_known

_LETTERS = string.ascii_lowercase


@dataclass(frozen=True)
class Example:
    task: str
    prompt: str
    answer: str


def _number(rng: random.Random) -> int:
    """1-3 digits, each length equally likely, so short sums are not drowned out by long ones."""
    digits = rng.randint(1, 3)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _word(rng: random.Random, lo: int = 3, hi: int = 8, alphabet: str = _LETTERS) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def _sample_add(rng: random.Random) -> str:
    a, b = _number(rng), _number(rng)
    return f"What is {a}+{b}?" if rng.random() < 0.5 else f"{a}+{b}="


def _sample_reverse(rng: random.Random) -> str:
    return f"Reverse: {_word(rng)}"


def _sample_copy(rng: random.Random) -> str:
    return f"Repeat: {_word(rng)}"


def _sample_lookup(rng: random.Random) -> str:
    keys = rng.sample(_LETTERS, rng.randint(3, 5))
    pairs = ", ".join(f"{k}={_number(rng)}" for k in keys)
    return f"{pairs}. What is {rng.choice(keys)}?"


def _sample_count(rng: random.Random) -> str:
    # A small alphabet per prompt so the asked letter usually occurs more than once.
    alphabet = "".join(rng.sample(_LETTERS, 3))
    word = _word(rng, 4, 8, alphabet)
    return f"How many {rng.choice(alphabet)} in {word}?"


_SAMPLERS: dict[str, Callable[[random.Random], str]] = {
    "add": _sample_add,
    "reverse": _sample_reverse,
    "lookup": _sample_lookup,
    "copy": _sample_copy,
    "count": _sample_count,
}


def sample(task: str, rng: random.Random) -> Example:
    """One example of `task`; the same rng state always gives the same example."""
    check_known(task)
    prompt = _SAMPLERS[task](rng)
    answer = ANSWERS[task](prompt)
    assert answer is not None, prompt  # every sampler's prompt must parse back
    return Example(task, prompt, answer)


def dataset(n: int, seed: int, tasks: Sequence[str] = TASKS) -> list[Example]:
    """`n` examples cycling through `tasks` in order, so every task gets an equal share."""
    if not tasks:
        raise ValueError("no tasks")
    for t in tasks:
        check_known(t)
    rng = random.Random(seed)
    return [sample(tasks[i % len(tasks)], rng) for i in range(n)]
