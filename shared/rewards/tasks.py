"""Checkable tasks: prompts that carry everything needed to compute their answer, so `check`
scores a completion from the prompt and completion alone (the `task_check` reward function).

| task | prompt | answer |
|---|---|---|
| add | `What is 37+58?` or `37+58=` (1-3 digit operands) | `95` |
| reverse | `Reverse: pilot` (3-8 letters) | `tolip` |
| lookup | `a=17, k=42, z=5. What is k?` (3-5 pairs) | `42` |
| copy | `Repeat: pilot` (3-8 letters) | `pilot` |
| count | `How many b in abcbd?` | `2` |

The local model builder trains on the same tasks (shared/devstack/models/tasks.py samples them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

TASKS: tuple[str, ...] = ("add", "reverse", "lookup", "copy", "count")

# End-of-turn markers a completion may still carry when the engine does not strip them.
END_MARKERS: tuple[str, ...] = ("<|eos|>", "<|end|>", "</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>")

_NUMERIC = frozenset({"add", "lookup", "count"})

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


# Each task's answer from its prompt (None: the prompt is not of that task).
ANSWERS: dict[str, Callable[[str], str | None]] = {
    "add": _answer_add,
    "reverse": _answer_reverse,
    "lookup": _answer_lookup,
    "copy": _answer_copy,
    "count": _answer_count,
}


def check_known(task: str) -> None:
    """Raise ValueError for a task name that is not one of TASKS."""
    if task not in ANSWERS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")


def answer(task: str, prompt: str) -> str:
    """The true answer, computed from the prompt alone."""
    check_known(task)
    truth = ANSWERS[task](prompt.strip())
    if truth is None:
        raise ValueError(f"prompt is not a {task!r} prompt: {prompt!r}")
    return truth


def detect(prompt: str, tasks: Iterable[str] = TASKS) -> str | None:
    """Which task a prompt belongs to (None: not one of ours), for callers that only see the text."""
    for t in tasks:
        if ANSWERS[t](prompt.strip()) is not None:
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
