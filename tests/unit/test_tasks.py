from __future__ import annotations

import random

import pytest

from shared.devstack.models import tasks
from shared.rewards import tasks as checks


def test_dataset_is_deterministic_per_seed() -> None:
    assert tasks.dataset(50, seed=3) == tasks.dataset(50, seed=3)
    assert tasks.dataset(50, seed=3) != tasks.dataset(50, seed=4)


def test_dataset_cycles_through_the_tasks() -> None:
    examples = tasks.dataset(20, seed=0, tasks=("add", "lookup"))
    assert [e.task for e in examples] == ["add", "lookup"] * 10


def test_sample_depends_only_on_the_rng_state() -> None:
    for task in tasks.TASKS:
        assert tasks.sample(task, random.Random(9)) == tasks.sample(task, random.Random(9))


@pytest.mark.parametrize("task", tasks.TASKS)
def test_prompts_differ_across_samples(task: str) -> None:
    rng = random.Random(1)
    prompts = {tasks.sample(task, rng).prompt for _ in range(50)}
    assert len(prompts) > 40


@pytest.mark.parametrize("task", tasks.TASKS)
def test_check_accepts_the_true_answer(task: str) -> None:
    for e in tasks.dataset(30, seed=2, tasks=(task,)):
        assert e.task == task
        assert checks.answer(task, e.prompt) == e.answer
        assert checks.detect(e.prompt) == task
        for completion in (e.answer, f" {e.answer}\n", f"{e.answer}<|eos|>", f"{e.answer} </s> junk"):
            assert checks.check(task, e.prompt, completion), (e, completion)


@pytest.mark.parametrize("task", tasks.TASKS)
def test_check_rejects_a_wrong_answer(task: str) -> None:
    for e in tasks.dataset(30, seed=5, tasks=(task,)):
        wrong = str(int(e.answer) + 1) if e.answer.isdigit() else e.answer + "x"
        assert not checks.check(task, e.prompt, wrong), (e, wrong)
        assert not checks.check(task, e.prompt, ""), e
        assert not checks.check(task, e.prompt, "<|eos|>" + e.answer), e


def test_known_answers() -> None:
    assert checks.check("add", "What is 37+58?", "95")
    assert checks.check("add", "2+2=", "The answer is 4.")
    assert not checks.check("add", "2+2=", "5 or 4")
    assert checks.check("reverse", "Reverse: pilot", "'tolip'.")
    assert checks.check("reverse", "Reverse: pilot", "TOLIP")
    assert not checks.check("reverse", "Reverse: pilot", "tolipp")
    assert checks.check("lookup", "a=17, k=42, z=5. What is k?", "42<|end|>")
    assert checks.check("copy", "Repeat: abc", "abc")
    assert checks.check("count", "How many b in abcbd?", "2")


def test_operands_and_words_stay_in_range() -> None:
    for e in tasks.dataset(500, seed=7):
        if e.task == "add":
            a, b = e.prompt.removeprefix("What is ").rstrip("?=").split("+")
            assert 1 <= len(a) <= 3 and 1 <= len(b) <= 3
        elif e.task in ("reverse", "copy"):
            word = e.prompt.split(": ")[1]
            assert 3 <= len(word) <= 8 and word.isalpha() and word.islower()
        elif e.task == "lookup":
            assert 3 <= e.prompt.count("=") <= 5


def test_unknown_task_or_foreign_prompt_is_an_error() -> None:
    with pytest.raises(ValueError):
        tasks.sample("nope", random.Random(0))
    with pytest.raises(ValueError):
        checks.check("add", "Reverse: abc", "cba")
    assert checks.detect("hello there") is None
