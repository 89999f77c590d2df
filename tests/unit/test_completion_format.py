"""The builder trains sy-tiny on the plain completion format beside the chat template, with the
ids a /v1/completions request gives the engine (shared/devstack/models/training.py)."""

from __future__ import annotations

import itertools
import random

import pytest

pytest.importorskip("tokenizers")

from shared.devstack.models import build, tasks, training  # noqa: E402
from shared.devstack.models.tokenizer import BOS, EOS, train_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tok():  # noqa: ANN201
    return train_tokenizer({**build.DEFAULT_TOKENIZER, "corpus_examples": 500}, seed=0)


def test_completion_examples_are_the_served_prompt_ids_then_the_answer(tok) -> None:
    """Prompt ids exactly as the engine encodes a completions prompt (no BOS, no template), then
    ' <answer>' and eos; only the answer is trained on."""
    rng = random.Random(3)
    for task in tasks.TASKS:
        e = tasks.sample(task, rng)
        ids, n_prompt = training._encode(tok, e, "completion")
        served = tok.encode(e.prompt).ids  # shared/generation/engine_io.py: tokenizer.encode(prompt)
        assert ids[:n_prompt] == served and n_prompt == len(served)
        assert tok.token_to_id(BOS) not in ids
        assert ids[-1] == tok.token_to_id(EOS)
        assert tok.decode(ids[n_prompt:-1]) == " " + e.answer
        chat, n_chat = training._encode(tok, e, "chat")
        assert chat[0] == tok.token_to_id(BOS) and chat[:n_prompt] != served  # the two formats differ


def test_the_stream_mixes_formats_by_share_and_keeps_the_same_examples(tok) -> None:
    weights = {t: 1.0 for t in tasks.TASKS}
    mixed = list(itertools.islice(training._stream(weights, 0, set(), 0.3), 2000))
    share = sum(fmt == "completion" for _, fmt in mixed) / len(mixed)
    assert 0.25 < share < 0.35
    chat_only = list(itertools.islice(training._stream(weights, 0, set(), 0.0), 2000))
    assert {fmt for _, fmt in chat_only} == {"chat"}
    assert [e for e, _ in mixed] == [e for e, _ in chat_only]  # the share does not change the examples
    held_out = {mixed[0][0].prompt}
    assert all(
        e.prompt not in held_out
        for e, _ in itertools.islice(training._stream(weights, 0, held_out, 0.3), 500)
    )


def test_packed_rows_train_only_the_answers_of_both_formats(tok) -> None:
    pairs = [
        (tasks.sample("copy", random.Random(i)), fmt) for i, fmt in enumerate(["chat", "completion"] * 4)
    ]
    batch = next(training._packed_batches(tok, iter(pairs), rows=1, width=64))
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    trained = [i for i, lab in zip(ids, labels, strict=True) if lab != -100]
    answers = [
        t for e, fmt in pairs for t in training._encode(tok, e, fmt)[0][training._encode(tok, e, fmt)[1] :]
    ]
    assert trained == answers[: len(trained)] and trained


def test_recipe_default_is_by_steps_and_trains_both_formats() -> None:
    r = build.make_recipe(None, build.DEFAULT_STEPS, 0)
    assert r["train"]["max_steps"] == 1000 and r["train"]["minutes"] is None
    assert r["train"]["completion_share"] == 0.3
    with pytest.raises(ValueError, match="completion_share"):
        build.make_recipe(None, 10, 0, train={"completion_share": 1.5})
    assert build.recipe_hash(r) != build.recipe_hash(
        build.make_recipe(None, 1000, 0, train={"completion_share": 0.0})
    )
