"""The Triton text model's engine (deploy/triton/models/sy-tiny/1/llama_engine.py) against
transformers' LlamaForCausalLM: same greedy tokens, also when sequences of different lengths
share decode steps (continuous batching), and the stop/length/min_tokens rules."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import torch

from tests.helpers.kafka import ROOT

sys.path.insert(0, str(ROOT / "deploy" / "triton" / "models" / "sy-tiny" / "1"))
from llama_engine import Engine, GenRequest, GenStep  # noqa: E402

VOCAB = 96
EOS = 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, as larger Llamas use
        head_dim=16,
        intermediate_size=128,
        max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        eos_token_id=EOS,
        bos_token_id=1,
    )
    model = LlamaForCausalLM(cfg).eval()
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    Tokenizer(WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0")).save(str(out / "tokenizer.json"))
    return out, model


def hf_greedy(model: object, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        ids = model.generate(  # type: ignore[attr-defined]
            torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return ids[0, len(prompt) :].tolist()


def run(engine: Engine, reqs: list[dict]) -> list[list[GenStep]]:
    """Submit all at once (they share decode steps) and wait for every final step."""
    steps: list[list[GenStep]] = [[] for _ in reqs]
    done = [threading.Event() for _ in reqs]

    def emitter(i: int):
        def emit(step: GenStep) -> None:
            steps[i].append(step)
            if step.finish_reason:
                done[i].set()

        return emit

    for i, r in enumerate(reqs):
        engine.submit(GenRequest(emit=emitter(i), **r))
    for d in done:
        assert d.wait(30)
    return steps


def test_batched_greedy_matches_transformers_token_for_token(tiny) -> None:
    path, model = tiny
    engine = Engine(path, max_batch=4)
    engine.model.eos_ids = set()  # random weights: compare fixed-length runs
    engine.start()
    try:
        prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15, 16, 17], [20], [30, 31, 32, 33, 34], [40, 41]]
        reqs = [dict(prompt_ids=p, max_tokens=10 + i, temperature=0.0) for i, p in enumerate(prompts)]
        steps = run(engine, reqs)  # 5 requests, 4 slots: one waits and joins mid-way
    finally:
        engine.stop()
    for i, p in enumerate(prompts):
        ids = [t for s in steps[i] for t in s.token_ids]
        assert ids == hf_greedy(model, p, 10 + i), f"request {i}"
        assert steps[i][-1].finish_reason == "length"
        assert all(s.prompt_tokens == len(p) for s in steps[i])
    assert engine.steps < sum(10 + i for i in range(len(prompts)))  # decode steps were shared


def test_eos_stops_min_tokens_holds_it_off_and_sampling_is_seeded(tiny) -> None:
    path, model = tiny
    engine = Engine(path, max_batch=4)
    engine.start()
    try:
        greedy = hf_greedy(model, [3, 4], 6)
        engine.model.eos_ids = {greedy[2]}  # the third greedy token now ends the turn
        (stopped,) = run(engine, [dict(prompt_ids=[3, 4], max_tokens=6, temperature=0.0)])
        assert [t for s in stopped for t in s.token_ids] == greedy[:2]
        assert stopped[-1].finish_reason == "stop"
        (held,) = run(engine, [dict(prompt_ids=[3, 4], max_tokens=6, min_tokens=6, temperature=0.0)])
        assert len([t for s in held for t in s.token_ids]) == 6 and held[-1].finish_reason == "length"
        engine.model.eos_ids = set()
        a, b, c = run(
            engine,
            [
                dict(prompt_ids=[3, 4], max_tokens=12, temperature=1.0, seed=7),
                dict(prompt_ids=[3, 4], max_tokens=12, temperature=1.0, seed=7),
                dict(prompt_ids=[3, 4], max_tokens=12, temperature=1.0, seed=8),
            ],
        )
        ids = [[t for s in x for t in s.token_ids] for x in (a, b, c)]
        assert ids[0] == ids[1] != ids[2]
    finally:
        engine.stop()


def test_prompt_over_the_context_is_refused(tiny) -> None:
    path, _ = tiny
    engine = Engine(path, max_batch=1)
    with pytest.raises(ValueError, match="context"):
        engine.submit(GenRequest(prompt_ids=list(range(3, 70)), max_tokens=4, emit=lambda s: None))
