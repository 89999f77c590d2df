"""Hostile audio through preprocess's media stage for a model that takes audio (sy-vlm's layout):
each gets its own 4xx code and reason, never `no_pool`, and nothing is stored; the same bytes sent
to a text-only model are refused by pool capability first (`no_pool`, naming the modality)."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from switchyard.v1.envelope_pb2 import ChatMessage, ContentPart, InputAudio, Request

from services.preprocess.media_stage import MediaStage
from shared.devstack.models.audio import AUDIO
from shared.runtime.config import PoolConfig, Settings
from shared.runtime.envelope import Envelope, Kind, Rejected
from shared.runtime.storage import LocalStore
from tests.helpers import media_files as mf

POOLS = [
    PoolConfig(
        name="triton",
        engine="triton",
        models=["sy-tiny", "alm-test"],
        modalities=["text", "image", "audio"],
        media_models=["alm-test"],
    )
]


@pytest.fixture
def stage(tmp_path: Path) -> MediaStage:
    d = tmp_path / "models" / "alm-test"
    d.mkdir(parents=True)
    config = {"model_type": "sy_vlm", "audio_config": AUDIO, "text_config": {"max_position_embeddings": 512}}
    (d / "config.json").write_text(json.dumps(config))
    s = Settings(
        models_dir=tmp_path / "models",
        storage_dir=tmp_path / "objects",
        var_dir=tmp_path / "var",
        pools=POOLS,
    )
    return MediaStage(s, LocalStore(s.object_dir))


def request(data: bytes | str, fmt: str, model: str = "alm-test") -> Envelope:
    b64 = data if isinstance(data, str) else mf.b64(data)
    part = ContentPart(type="input_audio", input_audio=InputAudio(data=b64, format=fmt))
    msg = ChatMessage(role="user", parts=[ContentPart(type="text", text="How many beeps?"), part])
    return Envelope(
        request_id="r", tenant="acme", kind=Kind.KIND_CHAT, model=model, request=Request(messages=[msg])
    )


def wav(samples: np.ndarray, rate: int = 16000, declared_bytes: int | None = None) -> bytes:
    """A PCM16 mono WAV written by hand, so its data chunk's size can lie."""
    pcm = (np.asarray(samples) * 32767).astype("<i2").tobytes()
    size = len(pcm) if declared_bytes is None else declared_bytes
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", size) + pcm
    return b"RIFF" + struct.pack("<I", len(body)) + body


def encoded(seconds: float, rate: int, channels: int, fmt: str = "WAV", subtype: str = "PCM_16") -> bytes:
    b = io.BytesIO()
    t = np.arange(int(seconds * rate)) / rate
    x = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    sf.write(b, np.stack([x] * channels, axis=1), rate, format=fmt, subtype=subtype)
    return b.getvalue()


ONE_S = np.sin(np.arange(16000) / 7) * 0.3

HOSTILE = {
    "truncated header": (wav(ONE_S)[:30], "wav", "invalid_audio", 400, "No 'data' chunk"),
    "truncated samples": (wav(ONE_S, declared_bytes=64000), "wav", "invalid_audio", 400, "truncated WAV"),
    "header claims an hour": (
        wav(ONE_S, declared_bytes=3600 * 32000), "wav", "media_too_large", 413, "declares 3600.00 s"
    ),
    "zero-length": ("", "wav", "invalid_audio", 400, "audio is empty"),
    "no samples": (wav(np.zeros(0)), "wav", "invalid_audio", 400, "no samples"),
    "10-minute clip": (encoded(600, 8000, 1, subtype="PCM_U8"), "wav", "media_too_large", 413, "600.00 s"),
    "random bytes as wav": (np.random.default_rng(0).bytes(4000), "wav", "unsupported_media", 415, "unknown"),
    "RIFF header, garbage after": (
        b"RIFF" + struct.pack("<I", 4000) + b"WAVE" + np.random.default_rng(1).bytes(4000),
        "wav", "invalid_audio", 400, "cannot decode wav",
    ),
    "MP4 declared as mp3": (mf.mp4_box(), "mp3", "unsupported_media", 415, "MP4"),
    "AAC format": (mf.mp4_box(), "aac", "unsupported_media", 415, "'aac'"),
    "WAV declared as mp3": (wav(ONE_S), "mp3", "media_type_mismatch", 400, "bytes are wav"),
    "4 kHz": (encoded(1, 4000, 1), "wav", "invalid_audio", 400, "4000 Hz"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_hostile_audio_gets_its_own_refusal(stage: MediaStage, case: str) -> None:
    data, fmt, code, status, words = HOSTILE[case]
    with pytest.raises(Rejected) as e:
        await stage.analyse(request(data, fmt))
    assert (e.value.code, e.value.http_status) == (code, status), e.value.reason
    assert words in e.value.reason and e.value.reason.startswith("request.messages[0].parts[1]: ")
    assert "<_io.BytesIO" not in e.value.reason  # no repr of our buffer in what the client reads
    assert list((stage.s.object_dir).glob("**/*.wav")) == []


async def test_to_a_text_only_model_the_refusal_is_no_pool_with_the_modality(stage: MediaStage) -> None:
    """Pool capability is checked before any decoding: for a model no pool takes audio for,
    even broken audio is `no_pool` (the reason names 'audio'), decoded by nobody."""
    for data, fmt in ((wav(ONE_S), "wav"), (wav(ONE_S)[:30], "wav")):
        with pytest.raises(Rejected) as e:
            await stage.analyse(request(data, fmt, model="sy-tiny"))
        assert (e.value.code, e.value.http_status) == ("no_pool", 404)
        assert "'audio'" in e.value.reason and "sy-tiny" in e.value.reason


@pytest.mark.parametrize(
    ("data", "fmt", "tokens"),
    [
        (wav(ONE_S), "wav", 25),  # 16 kHz mono, 1 s: 25 tokens (sy_audio: one per 640 samples)
        (encoded(1, 96000, 2), "wav", 25),  # stereo 96 kHz: mixed down, resampled, same second
        (encoded(1.5, 44100, 2, "FLAC"), "flac", 38),
    ],
)
async def test_valid_audio_is_charged_by_the_models_rule(stage: MediaStage, data, fmt, tokens) -> None:
    found = await stage.analyse(request(data, fmt))
    assert found.audio_tokens == tokens and found.items[0].mime == "audio/wav"


async def test_mp3_is_accepted_and_charged_for_its_decoded_length(stage: MediaStage) -> None:
    found = await stage.analyse(request(encoded(1, 44100, 1, "MP3", "MPEG_LAYER_III"), "mp3"))
    assert 25 <= found.audio_tokens <= 27  # the codec's padding may add a few ms


async def test_a_clip_longer_than_the_context_allows_is_refused_with_the_count(stage: MediaStage) -> None:
    """25 s is within the duration limit (30 s) but 625 audio tokens do not fit 512."""
    env = request(wav(np.zeros(25 * 16000)), "wav")
    found = await stage.analyse(env)
    with pytest.raises(Rejected) as e:
        stage.check_context(env, found, 10)
    assert e.value.code == "context_length_exceeded" and "625 audio" in e.value.reason
