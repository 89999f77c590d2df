"""The Triton text model's engine (deploy/triton/models/sy-tiny/1/llama_engine.py) against
transformers' LlamaForCausalLM: same greedy tokens, also when sequences of different lengths
share decode steps (continuous batching), and the stop/length/min_tokens rules."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
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


def test_logprobs_are_the_models_raw_distribution_with_the_top_k(tiny) -> None:
    """LOGPROBS as vLLM reports them by default: log-softmax of the raw logits (before
    temperature), per sampled token, with the k most likely tokens ranked."""
    path, model = tiny
    engine = Engine(path, max_batch=2)
    engine.model.eos_ids = set()
    engine.start()
    try:
        (greedy, sampled, plain) = run(
            engine,
            [
                dict(prompt_ids=[5, 6, 7], max_tokens=4, temperature=0.0, logprobs=3),
                dict(prompt_ids=[5, 6, 7], max_tokens=4, temperature=1.7, seed=3, logprobs=0),
                dict(prompt_ids=[5, 6, 7], max_tokens=4, temperature=0.0),
            ],
        )
    finally:
        engine.stop()
    ids = [t for s in greedy for t in s.token_ids]
    with torch.no_grad():
        logits = model(torch.tensor([[5, 6, 7, *ids]])).logits[0]  # type: ignore[operator]
    ref = torch.log_softmax(logits.float(), -1)[2:-1]  # the distribution each token was drawn from
    got = [(s.logprobs[0], s.top_ids[0], s.top_logprobs[0]) for s in greedy if s.token_ids]
    assert len(got) == 4
    for j, (lp, top_ids, top_lps) in enumerate(got):
        assert lp == pytest.approx(float(ref[j, ids[j]]), abs=1e-4)
        assert top_ids == ref[j].topk(3).indices.tolist()
        assert top_ids[0] == ids[j]  # greedy: the sampled token is the most likely
        assert top_lps == pytest.approx(ref[j].topk(3).values.tolist(), abs=1e-4)
    # Sampled at temperature 1.7, the logprob is still the raw model's, not the tempered one's.
    sids = [t for s in sampled for t in s.token_ids]
    with torch.no_grad():
        slogits = model(torch.tensor([[5, 6, 7, *sids]])).logits[0]  # type: ignore[operator]
    sref = torch.log_softmax(slogits.float(), -1)[2:-1]
    assert [s.logprobs[0] for s in sampled if s.token_ids] == pytest.approx(
        [float(sref[j, t]) for j, t in enumerate(sids)], abs=1e-4
    )
    assert all(s.top_ids == [[]] for s in sampled if s.token_ids)
    assert all(s.logprobs == [] for s in plain)  # not asked: nothing computed or sent


def test_worker_sends_each_choice_its_own_seed_and_refuses_what_the_model_lacks() -> None:
    from services.triton_worker.client import choice_kwargs, generation_inputs, unsupported_options

    kw = {"n": 3, "seed": 41, "temperature": 1.0, "max_tokens": 4, "logprobs": 2}
    assert [choice_kwargs(kw, i)["seed"] for i in range(3)] == [41, 42, 43]
    assert choice_kwargs({"n": 2, "seed": None}, 1)["seed"] is None  # greedy: no seed to vary
    names = {i.name(): i for i in generation_inputs([5, 6], kw)}
    assert "LOGPROBS" in names and "LOGPROBS" not in {
        i.name() for i in generation_inputs([5], {**kw, "logprobs": None})
    }
    assert unsupported_options(kw) == []
    assert unsupported_options({**kw, "presence_penalty": 0.5}) == ["presence_penalty"]


@pytest.fixture(scope="module")
def tiny_vlm(tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny decoder behind sy-vlm's image encoder, laid out as shared/devstack/models/vlm.py builds it."""
    import json
    import shutil

    from safetensors.torch import save_file

    from shared.devstack.models.vlm import vision_tensors

    path, _ = tiny
    out = tmp_path_factory.mktemp("tiny-vlm")
    for f in ("model.safetensors", "tokenizer.json"):
        shutil.copy2(path / f, out / f)
    vision = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64, "seed": 1}
    save_file(vision_tensors(vision, 64), str(out / "vision.safetensors"))
    text = json.loads((path / "config.json").read_text())
    cfg = {"model_type": "sy_vlm", "image_token_index": 0, "vision_config": vision, "text_config": text}
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_vlm_injects_image_embeddings_at_the_placeholders_like_llava(tiny, tiny_vlm) -> None:
    """Greedy tokens with an image equal transformers' Llama fed the same embeddings (the
    placeholders' rows replaced by the encoder's patch embeddings); another image changes
    the answer; a span outside the prompt and images for a text model are refused."""
    from vision_tower import VisionTower

    _, model = tiny
    engine = Engine(tiny_vlm, max_batch=2)
    engine.model.eos_ids = set()
    tower = VisionTower(tiny_vlm)
    assert tower.tokens_per_image == 16
    rng = np.random.default_rng(0)
    red = np.zeros((1, 32, 32, 3), np.uint8)
    red[..., 0] = 255
    noise = rng.integers(0, 256, (1, 32, 32, 3), dtype=np.uint8)
    prompt = [1] + [0] * 16 + [5, 6, 7]
    engine.start()
    try:
        a, b, plain = run(
            engine,
            [
                dict(prompt_ids=prompt, max_tokens=8, temperature=0.0, images=red, image_offsets=[1]),
                dict(prompt_ids=prompt, max_tokens=8, temperature=0.0, images=noise, image_offsets=[1]),
                dict(prompt_ids=prompt, max_tokens=8, temperature=0.0),
            ],
        )
        with pytest.raises(ValueError, match="outside the prompt"):
            engine.submit(
                GenRequest(
                    prompt_ids=prompt, max_tokens=2, emit=lambda s: None, images=red, image_offsets=[10]
                )
            )
    finally:
        engine.stop()
    ids = {k: [t for s in x for t in s.token_ids] for k, x in (("red", a), ("noise", b), ("plain", plain))}
    emb = model.get_input_embeddings()(torch.tensor([prompt])).detach().clone()  # type: ignore[attr-defined]
    emb[0, 1:17] = tower.embed(torch.as_tensor(red))[0]
    with torch.no_grad():
        ref = model.generate(  # type: ignore[attr-defined]
            inputs_embeds=emb, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    assert ids["red"] == ref[0, -8:].tolist()
    assert ids["red"] != ids["noise"] or ids["red"] != ids["plain"], ids  # the image is looked at
    text_only = Engine(tiny[0], max_batch=1)
    with pytest.raises(ValueError, match="takes no images"):
        text_only.submit(
            GenRequest(prompt_ids=prompt, max_tokens=2, emit=lambda s: None, images=red, image_offsets=[1])
        )


def test_worker_crops_resizes_and_places_image_tokens_after_bos() -> None:
    import io

    from PIL import Image

    from services.triton_worker.media import VisionSpec, image_array, with_placeholders

    spec = VisionSpec(image_size=64, patch=16, image_token=0)
    ids, offsets = with_placeholders([1, 9, 9], 2, spec, bos=1)
    assert ids == [1] + [0] * 32 + [9, 9] and offsets == [1, 17]
    assert with_placeholders([9], 1, spec, bos=1)[1] == [0]  # no BOS: images lead
    im = Image.new("RGB", (300, 100), (0, 0, 255))
    im.paste((255, 0, 0), (100, 0, 200, 100))  # the centre square is red, the sides blue
    buf = io.BytesIO()
    im.save(buf, "PNG")
    arr = image_array(buf.getvalue(), 64)
    assert arr.shape == (64, 64, 3) and arr.dtype == np.uint8
    assert arr[..., 0].mean() > 250 and arr[..., 2].mean() < 5  # CLIP-style centre crop


async def test_media_inputs_fetch_claim_checked_images_and_refuse_what_the_model_cannot_take(
    tmp_path,
) -> None:
    import io
    from types import SimpleNamespace

    from PIL import Image
    from switchyard.v1.envelope_pb2 import MediaRef

    from services.triton_worker.media import VisionSpec, media_inputs
    from shared.runtime.envelope import Envelope, Rejected
    from shared.runtime.storage import LocalStore

    store = LocalStore(tmp_path)
    buf = io.BytesIO()
    Image.new("RGB", (80, 40), (0, 200, 0)).save(buf, "PNG")
    await store.put("media/ab/green.png", buf.getvalue())
    tok = SimpleNamespace(bos_token_id=1)
    vlm = SimpleNamespace(vision=VisionSpec(32, 8, 0), audio=None, tokenizer=tok)
    text_model = SimpleNamespace(vision=None, audio=None, tokenizer=tok)
    env = Envelope(model="m")
    assert await media_inputs(env, [1, 5], vlm, store, "b") == ([1, 5], None)  # no media: as is
    env.media.append(MediaRef(uri="s3://b/media/ab/green.png", modality="image"))
    ids, extra = await media_inputs(env, [1, 5], vlm, store, "b")
    (_, pixels, _), (_, offsets, _) = extra
    assert ids == [1] + [0] * 16 + [5] and offsets.tolist() == [1] and pixels.shape == (1, 32, 32, 3)
    assert pixels[0, ..., 1].mean() > 190
    with pytest.raises(Rejected, match="takes no image input"):
        await media_inputs(env, [1, 5], text_model, store, "b")
    gone = Envelope(model="m", media=[MediaRef(uri="s3://b/media/zz/none.png", modality="image")])
    with pytest.raises(Rejected, match="no longer in object storage"):
        await media_inputs(gone, [1], vlm, store, "b")
    audio = Envelope(model="m", media=[MediaRef(uri="s3://b/x.wav", modality="audio")])
    with pytest.raises(Rejected, match="no audio"):  # an image model without an audio encoder
        await media_inputs(audio, [1], vlm, store, "b")
