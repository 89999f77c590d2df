"""Synthetic tasks whose answers a program can check: training data, test oracles and RL rewards.

Every prompt carries everything needed to compute its answer, so `check` works from the prompt
and completion alone (the reward service sees nothing else). Generation is deterministic for a
seeded `random.Random`; no torch here, so services can import this without the model stack.

| task | prompt | answer |
|---|---|---|
| add | `What is 37+58?` or `37+58=` (1-3 digit operands) | `95` |
| reverse | `Reverse: pilot` (3-8 letters) | `tolip` |
| lookup | `a=17, k=42, z=5. What is k?` (3-5 pairs) | `42` |
| copy | `Repeat: pilot` (3-8 letters) | `pilot` |
| count | `How many b in abcbd?` | `2` |
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

TASKS: tuple[str, ...] = ("add", "reverse", "lookup", "copy", "count")

# End-of-turn markers a completion may still carry when the engine does not strip them.
END_MARKERS: tuple[str, ...] = ("<|eos|>", "<|end|>", "</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>")

_LETTERS = string.ascii_lowercase
_NUMERIC = frozenset({"add", "lookup", "count"})


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

_ADD = re.compile(r"^(?:What is )?(\d+)\+(\d+)(?:\?|=)$")
_REVERSE = re.compile(r"^Reverse: ([a-z]+)$")
_COPY = re.compile(r"^Repeat: ([a-z]+)$")
_LOOKUP = re.compile(r"^((?:[a-z]=\d+, )*[a-z]=\d+)\. What is ([a-z])\?$")
_COUNT = re.compile(r"^How many ([a-z]) in ([a-z]+)\?$")


def _answer_add(prompt: str) -> str | None:
    m = _ADD.match(prompt)
    return str(int(m[1]) + int(m[2])) if m else None


def _answer_reverse(prompt: str) -> str | None:
    m = _REVERSE.match(prompt)
    return m[1][::-1] if m else None


def _answer_copy(prompt: str) -> str | None:
    m = _COPY.match(prompt)
    return m[1] if m else None


def _answer_lookup(prompt: str) -> str | None:
    m = _LOOKUP.match(prompt)
    if not m:
        return None
    table = dict(pair.split("=") for pair in m[1].split(", "))
    return table.get(m[2])


def _answer_count(prompt: str) -> str | None:
    m = _COUNT.match(prompt)
    return str(m[2].count(m[1])) if m else None


_ANSWERS: dict[str, Callable[[str], str | None]] = {
    "add": _answer_add,
    "reverse": _answer_reverse,
    "lookup": _answer_lookup,
    "copy": _answer_copy,
    "count": _answer_count,
}


def _known(task: str) -> None:
    if task not in _SAMPLERS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")


def sample(task: str, rng: random.Random) -> Example:
    """One example of `task`; the same rng state always gives the same example."""
    _known(task)
    prompt = _SAMPLERS[task](rng)
    answer = _ANSWERS[task](prompt)
    assert answer is not None, prompt  # every sampler's prompt must parse back
    return Example(task, prompt, answer)


def dataset(n: int, seed: int, tasks: Sequence[str] = TASKS) -> list[Example]:
    """`n` examples cycling through `tasks` in order, so every task gets an equal share."""
    if not tasks:
        raise ValueError("no tasks")
    for t in tasks:
        _known(t)
    rng = random.Random(seed)
    return [sample(tasks[i % len(tasks)], rng) for i in range(n)]


def answer(task: str, prompt: str) -> str:
    """The true answer, computed from the prompt alone."""
    _known(task)
    truth = _ANSWERS[task](prompt.strip())
    if truth is None:
        raise ValueError(f"prompt is not a {task!r} prompt: {prompt!r}")
    return truth


def detect(prompt: str, tasks: Iterable[str] = TASKS) -> str | None:
    """Which task a prompt belongs to (None: not one of ours), for callers that only see the text."""
    for t in tasks:
        if _ANSWERS[t](prompt.strip()) is not None:
            return t
    return None


def clean(completion: str) -> str:
    """The completion up to its first end marker, without surrounding whitespace."""
    cut = len(completion)
    for marker in END_MARKERS:
        i = completion.find(marker)
        if i != -1:
            cut = min(cut, i)
    return completion[:cut].strip()


def check(task: str, prompt: str, completion: str) -> bool:
    """Whether `completion` answers `prompt`, read leniently.

    Numeric tasks compare the first integer in the completion; string tasks compare its first
    word, case-insensitively, ignoring quotes and trailing punctuation. Raises ValueError when the
    prompt is not a `task` prompt, since that is a caller bug rather than a wrong answer.
    """
    truth = answer(task, prompt)
    text = clean(completion)
    if task in _NUMERIC:
        m = re.search(r"-?\d+", text)
        return m is not None and int(m[0]) == int(truth)
    first = text.split(maxsplit=1)[0] if text else ""
    return first.strip("\"'`.,;:!?").lower() == truth
