"""sy-vlm's audio path, without Triton: the encoder's shapes and token count
(deploy/triton/models/sy-tiny/1/audio_tower.py), the engine injecting clip embeddings at their
placeholders, the worker's audio inputs (services/triton_worker/media.py), preprocess's `sy_audio`
rule, and the synthetic clips the builder trains on (shared/devstack/models/audio.py)."""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.helpers.kafka import ROOT

sys.path.insert(0, str(ROOT / "deploy" / "triton" / "models" / "sy-tiny" / "1"))
import audio_tower  # noqa: E402
from llama_engine import Engine, GenRequest, GenStep  # noqa: E402

from shared.devstack.models import audio  # noqa: E402

SMALL = {**audio.AUDIO, "hidden_size": 32, "intermediate_size": 64, "n_mels": 16, "heads": 2}


def test_one_embedding_per_640_samples_whatever_the_length() -> None:
    """ceil(samples / 640), at least 1: the count preprocess charges (25 per second)."""
    w = audio.audio_tensors(SMALL, text_hidden=48)
    for n, want in ((1, 1), (639, 1), (640, 1), (641, 2), (16000, 25), (16001, 26), (48000, 75)):
        assert audio_tower.tokens_for(n, SMALL) == want
        out = audio_tower.encode(w, torch.zeros(n), SMALL)
        assert out.shape == (want, 48), n
    assert audio.tokens_per_second(SMALL) == 25.0
    assert audio_tower.mel_filters(400, 16).shape == (16, 201)


def test_the_encoder_hears_the_clip() -> None:
    """Different clips give different embeddings, the same clip the same ones."""
    w = audio.audio_tensors(SMALL, text_hidden=48)
    rng = np.random.default_rng(0)
    a = torch.from_numpy(audio.beeps_clip(2, rng, 1.0))
    b = torch.from_numpy(audio.pitch_clip("high", rng, 1.0))
    ea, eb = audio_tower.encode(w, a, SMALL), audio_tower.encode(w, b, SMALL)
    assert torch.equal(ea, audio_tower.encode(w, a, SMALL))
    assert (ea - eb).abs().mean() > 1e-3


def test_synthetic_clips_hold_what_their_answer_says() -> None:
    rng = np.random.default_rng(1)
    for n in range(1, audio.MAX_BEEPS + 1):
        clip = audio.beeps_clip(n, rng, 2.5)
        loud = np.abs(clip) > 0.1  # the beeps, not the noise floor
        bursts_on = np.convolve(loud.astype(float), np.ones(160), "same") > 0  # 10 ms smoothing
        bursts = int(np.sum(bursts_on[1:] & ~bursts_on[:-1]))
        assert bursts == n, (n, bursts)
    for band, (lo, hi) in audio.BANDS.items():
        clip = audio.pitch_clip(band, rng, 1.0)
        peak = np.argmax(np.abs(np.fft.rfft(clip))) * audio.RATE / len(clip)
        assert lo - 2 <= peak <= hi + 2, (band, peak)
    with pytest.raises(ValueError):
        audio.beeps_clip(0, rng)


@pytest.fixture(scope="module")
def tiny_alm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """A tiny Llama with an audio encoder beside it, in sy-vlm's file layout."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        head_dim=12, intermediate_size=96, max_position_embeddings=128,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False, eos_token_id=2, bos_token_id=1,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    out = tmp_path_factory.mktemp("tiny-alm")
    model.save_pretrained(out)
    Tokenizer(WordLevel({f"t{i}": i for i in range(64)}, unk_token="t0")).save(str(out / "tokenizer.json"))
    text = json.loads((out / "config.json").read_text())
    save_file(audio.audio_tensors(SMALL, 48, seed=3), str(out / "audio.safetensors"))
    conf = {"model_type": "sy_vlm", "audio_token_index": 0, "audio_config": SMALL, "text_config": text}
    (out / "config.json").write_text(json.dumps(conf))
    return out, model


def _run(engine: Engine, reqs: list[dict]) -> list[list[int]]:
    done = [threading.Event() for _ in reqs]
    outs: list[list[int]] = [[] for _ in reqs]

    def emit_for(i: int):  # noqa: ANN202
        def emit(step: GenStep) -> None:
            outs[i].extend(step.token_ids)
            if step.finish_reason:
                done[i].set()

        return emit

    for i, kw in enumerate(reqs):
        engine.submit(GenRequest(emit=emit_for(i), **kw))
    for d in done:
        assert d.wait(60)
    return outs


def test_engine_injects_clip_embeddings_at_their_placeholders(tiny_alm) -> None:
    """Greedy tokens with a clip equal transformers' Llama fed the same embeddings; another clip
    changes them; spans outside the prompt, unmatched offsets and audio for a text-only model are
    refused."""
    path, model = tiny_alm
    engine = Engine(path, max_batch=2)
    engine.model.eos_ids = set()
    rng = np.random.default_rng(0)
    beeps = audio.beeps_clip(3, rng, 1.0)  # 16000 samples: 25 placeholders
    tone = audio.pitch_clip("low", rng, 1.0)
    prompt = [1] + [0] * 25 + [5, 6, 7]
    engine.start()
    try:
        a, b = _run(
            engine,
            [
                dict(prompt_ids=prompt, max_tokens=6, temperature=0.0, audio=[beeps], audio_offsets=[1]),
                dict(prompt_ids=prompt, max_tokens=6, temperature=0.0, audio=[tone], audio_offsets=[1]),
            ],
        )
        for bad, why in (
            (dict(audio=[beeps], audio_offsets=[10]), "outside the prompt"),
            (dict(audio=[beeps], audio_offsets=[]), "offsets"),
        ):
            with pytest.raises(ValueError, match=why):
                engine.submit(GenRequest(prompt_ids=prompt, max_tokens=2, emit=lambda s: None, **bad))
    finally:
        engine.stop()
    tower = audio_tower.AudioTower(path)
    emb = model.get_input_embeddings()(torch.tensor([prompt])).detach().clone()
    emb[0, 1:26] = tower.embed(torch.from_numpy(beeps))
    with torch.no_grad():
        ref = model.generate(
            inputs_embeds=emb, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    assert a == ref[0, -6:].tolist()
    assert a != b  # the clip is listened to
    no_audio = Engine(path, max_batch=1)
    no_audio.audio = None
    with pytest.raises(ValueError, match="takes no audio"):
        no_audio.submit(
            GenRequest(prompt_ids=prompt, max_tokens=2, emit=lambda s: None, audio=[beeps], audio_offsets=[1])
        )


def _wav(samples: np.ndarray, rate: int = 16000, subtype: str = "PCM_16", channels: int = 1) -> bytes:
    b = io.BytesIO()
    data = samples if channels == 1 else np.stack([samples] * channels, axis=1)
    sf.write(b, data, rate, format="WAV", subtype=subtype)
    return b.getvalue()


async def test_worker_sends_samples_and_places_audio_after_images(tmp_path) -> None:
    from PIL import Image
    from switchyard.v1.envelope_pb2 import MediaRef

    from services.triton_worker.media import AudioSpec, VisionSpec, media_inputs
    from shared.runtime.envelope import Envelope, Rejected
    from shared.runtime.storage import LocalStore

    store = LocalStore(tmp_path)
    clip = (np.sin(np.arange(16000 + 100) / 5) * 0.5).astype(np.float32)  # 16100 samples: 26 tokens
    await store.put("media/aa/clip.wav", _wav(clip))
    png = io.BytesIO()
    Image.new("RGB", (40, 40), (9, 9, 9)).save(png, "PNG")
    await store.put("media/bb/pic.png", png.getvalue())
    await store.put("media/cc/stereo.wav", _wav(clip, channels=2))
    tok = SimpleNamespace(bos_token_id=1)
    model = SimpleNamespace(vision=VisionSpec(32, 8, 0), audio=AudioSpec(640, 7), tokenizer=tok)
    env = Envelope(
        model="m",
        media=[
            MediaRef(uri="s3://b/media/aa/clip.wav", modality="audio"),
            MediaRef(uri="s3://b/media/bb/pic.png", modality="image"),
        ],
    )
    ids, extra = await media_inputs(env, [1, 5, 6], model, store, "b")
    named = {name: arr for name, arr, _ in extra}
    assert ids == [1] + [0] * 16 + [7] * 26 + [5, 6]
    assert named["IMAGE_OFFSETS"].tolist() == [1] and named["AUDIO_OFFSETS"].tolist() == [17]
    assert named["AUDIO_SAMPLES"].tolist() == [16100] and named["AUDIO"].dtype == np.float32
    assert np.abs(named["AUDIO"] - clip).max() < 1e-3  # PCM16 back to float
    text_only = SimpleNamespace(vision=None, audio=None, tokenizer=tok)
    only_audio = Envelope(model="m", media=[MediaRef(uri="s3://b/media/aa/clip.wav", modality="audio")])
    with pytest.raises(Rejected, match="takes no audio input"):
        await media_inputs(only_audio, [1, 5], text_only, store, "b")
    not_normalised = Envelope(model="m", media=[MediaRef(uri="s3://b/media/cc/stereo.wav", modality="audio")])
    with pytest.raises(Rejected, match="mono PCM16"):
        await media_inputs(not_normalised, [1], model, store, "b")
    gone = Envelope(model="m", media=[MediaRef(uri="s3://b/media/zz/none.wav", modality="audio")])
    with pytest.raises(Rejected, match="no longer in object storage"):
        await media_inputs(gone, [1], model, store, "b")


def test_generation_inputs_carry_the_audio_tensors() -> None:
    from services.triton_worker.client import generation_inputs

    kw = {"max_tokens": 4, "temperature": 0.0}
    media = [
        ("AUDIO", np.zeros(700, np.float32), "FP32"),
        ("AUDIO_SAMPLES", np.asarray([700], np.int32), "INT32"),
        ("AUDIO_OFFSETS", np.asarray([1], np.int32), "INT32"),
    ]
    got = {i.name(): i for i in generation_inputs([1, 0, 0, 5], kw, media)}
    assert {"AUDIO", "AUDIO_SAMPLES", "AUDIO_OFFSETS"} <= set(got)
    assert got["AUDIO"].datatype() == "FP32" and got["AUDIO"].shape() == [700]


def test_sy_audio_rule_is_read_from_the_model_config() -> None:
    from services.preprocess.families import audio_rate, audio_tokens

    cfg = {"model_type": "sy_vlm", "audio_config": dict(audio.AUDIO)}
    assert audio_rate(cfg, 50.0) == 25.0
    slower = {"model_type": "sy_vlm", "audio_config": {**audio.AUDIO, "pool": 4}}
    assert audio_rate(slower, 50.0) == 12.5
    broken = {"model_type": "sy_vlm", "audio_config": {"model_type": "sy_audio", "pool": 0}}
    assert audio_rate(broken, 50.0) == 50.0  # a malformed config falls back, never crashes
    assert audio_rate({"model_type": "llama"}, 50.0) == 50.0
    # preprocess's count from the duration equals the encoder's from the samples, for every length
    # up to 30 s (unrounded, 34 of them were one over: 4480 / 16000 * 25 = 7.000000000000001)
    for n in range(1, 30 * 16000 + 1):
        assert audio_tokens(n / 16000, 25.0) == -(-n // 640) == audio_tower.tokens_for(n, audio.AUDIO), n
