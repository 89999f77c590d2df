"""Image and audio normalisation on real files generated here: accepted and normalised, or refused
with a clear reason (services/preprocess/media.py and audio.py)."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from services.preprocess.audio import normalize_audio
from services.preprocess.families import VisionRule, default_vision, smart_resize, vision_rule
from services.preprocess.media import (
    normalize_image,
    parse_data_url,
    sniff_image,
)
from shared.runtime.envelope import Rejected
from tests.helpers import media_files as mf

QWEN = default_vision("qwen2_vl")


def norm(data: bytes, mime: str | None = None, max_pixels: int = 1_003_520, **kw: object):
    def target(w: int, h: int) -> tuple[int, int]:
        return QWEN.target_size(w, h, max_pixels, 2048)

    return normalize_image(data, mime, max_input_pixels=40_000_000, target=target, **kw)  # type: ignore[arg-type]


def reopen(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


@pytest.mark.parametrize(
    ("fmt", "mime"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("GIF", "image/gif")],
)
def test_each_format_is_accepted_and_normalised_to_rgb_png(fmt: str, mime: str) -> None:
    src = mf.encode(mf.picture(320, 200), fmt)
    out = norm(src, mime)
    assert out.source_format == fmt and (out.source_width, out.source_height) == (320, 200)
    img = reopen(out.data)
    assert img.format == "PNG" and img.mode == "RGB" and img.size == (320, 200) == (out.width, out.height)
    assert out.mime == "image/png"
    # the red marker block survives every decode/encode (right pixels, not just a right size)
    assert img.getpixel((5, 5))[0] > 200 and img.getpixel((5, 5))[1] < 60


def test_large_image_is_shrunk_to_the_budget_keeping_aspect_and_never_upscaled() -> None:
    out = norm(mf.encode(mf.picture(4000, 3000), "JPEG"), "image/jpeg")
    assert out.width * out.height <= 1_003_520
    assert abs(out.width / out.height - 4000 / 3000) < 0.01
    assert out.width >= 1150  # shrunk to the budget, not far below it
    small = norm(mf.encode(mf.picture(40, 30), "PNG"))
    assert (small.width, small.height) == (40, 30)


def test_metadata_is_stripped_alpha_flattened_and_exif_orientation_applied() -> None:
    out = norm(mf.png_with_text(64, 48), "image/png")
    assert b"secret-author-name" not in out.data
    img = reopen(out.data)
    assert img.mode == "RGB" and not {"Author", "icc_profile", "exif"} & set(img.info)
    rot = norm(mf.jpeg_with_exif(80, 40, orientation=6), "image/jpeg")
    assert (rot.width, rot.height) == (40, 80)  # turned upright, then the EXIF is gone
    assert b"SecretCam" not in rot.data and b"Exif" not in rot.data


def test_animated_gif_keeps_the_first_frame() -> None:
    out = norm(mf.animated_gif(60, 40), "image/gif")
    assert (out.width, out.height) == (60, 40)
    assert reopen(out.data).getpixel((2, 2))[0] > 200  # frame 1's red marker, not frame 2


def test_same_pixels_give_the_same_bytes() -> None:
    """Content addressing works on the normalised output: one blob per picture, whatever the container."""
    pic = mf.picture(100, 80)
    assert norm(mf.encode(pic, "PNG")).data == norm(mf.encode(pic, "PNG", optimize=True)).data
    assert norm(mf.encode(pic, "WEBP", lossless=True)).data == norm(mf.encode(pic, "PNG")).data


def test_truncated_and_corrupt_images_are_refused() -> None:
    png = mf.encode(mf.picture(300, 300), "PNG")
    with pytest.raises(Rejected) as e:
        norm(png[: len(png) // 2], "image/png")
    assert e.value.code == "invalid_image" and "truncated" in e.value.reason
    jpg = mf.encode(mf.picture(300, 300), "JPEG")
    with pytest.raises(Rejected) as e:
        norm(jpg[:40], "image/jpeg")  # cut inside the headers
    assert e.value.code == "invalid_image"
    garbage = png[:33] + bytes(range(256)) * 8  # a valid IHDR, then noise where IDAT should be
    with pytest.raises(Rejected) as e:
        norm(garbage, "image/png")
    assert e.value.code == "invalid_image"


def test_declared_mime_must_match_the_bytes() -> None:
    jpg = mf.encode(mf.picture(32, 32), "JPEG")
    with pytest.raises(Rejected) as e:
        norm(jpg, "image/png")
    assert e.value.code == "media_type_mismatch"
    assert "declared image/png but the bytes are JPEG" in e.value.reason
    assert norm(jpg, "image/jpg").source_format == "JPEG"  # a common alias is fine


def test_not_an_image_is_refused_by_magic_bytes() -> None:
    for data, what in [(mf.encode(mf.picture(8, 8), "BMP"), "BMP"), (b"<svg xmlns='x'/>", "text")]:
        with pytest.raises(Rejected) as e:
            norm(data, "image/png")
        assert e.value.code == "unsupported_media" and what in e.value.reason and e.value.http_status == 415


@pytest.mark.parametrize("bomb", [mf.png_bomb(), mf.jpeg_bomb()], ids=["png-50k", "jpeg-60k"])
def test_decompression_bomb_is_refused_from_the_header_before_decoding(
    bomb: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_decoder(*a: object, **k: object) -> None:
        raise AssertionError("a decoder was opened for a bomb")

    monkeypatch.setattr(Image, "open", no_decoder)
    t = time.perf_counter()
    with pytest.raises(Rejected) as e:
        norm(bomb, None)
    assert e.value.code == "media_too_large" and e.value.http_status == 413
    assert "over the limit of 40000000" in e.value.reason and "before decoding" in e.value.reason
    assert time.perf_counter() - t < 1.0


def test_data_url_parsing_and_size_limit() -> None:
    png = mf.encode(mf.picture(8, 8), "PNG")
    assert parse_data_url(mf.data_url(png, "image/png"), 1 << 20) == ("image/png", png)
    for bad in ["data:image/png,rawbytes", "image/png;base64,AAAA", "data:image/png;base64,@@@@"]:
        with pytest.raises(Rejected):
            parse_data_url(bad, 1 << 20)
    with pytest.raises(Rejected) as e:
        parse_data_url(mf.data_url(b"\x00" * 5000, "image/png"), 1024)
    assert e.value.code == "media_too_large" and e.value.http_status == 413
    assert sniff_image(png) == "PNG"


# ------------------------------------------------------------------------------ audio


def anorm(data: bytes, fmt: str, max_seconds: float = 30.0):
    return normalize_audio(data, fmt, max_seconds=max_seconds, min_rate=8000, max_rate=96000)


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac", "ogg"])
def test_audio_is_decoded_and_resampled_to_16k_mono(fmt: str) -> None:
    out = anorm(mf.audio(fmt, seconds=2.0, rate=44100, channels=2), fmt)
    pcm, rate = sf.read(io.BytesIO(out.data), dtype="float32")
    assert rate == 16000 and pcm.ndim == 1 and out.mime == "audio/wav"
    assert out.source_rate == 44100 and out.source_channels == 2
    assert abs(out.duration_s - 2.0) < 0.06 and abs(len(pcm) / 16000 - out.duration_s) < 1e-6
    # still a 440 Hz tone after decoding and resampling
    spectrum = np.abs(np.fft.rfft(pcm[:16000]))
    assert abs(np.argmax(spectrum) - 440) <= 2


def test_too_long_audio_is_refused() -> None:
    with pytest.raises(Rejected) as e:
        anorm(mf.audio("flac", seconds=3.5, rate=8000, channels=1), "flac", max_seconds=3.0)
    assert e.value.code == "media_too_large" and "over the limit of 3 s" in e.value.reason


def test_unsupported_codec_and_format_mismatch_are_refused() -> None:
    with pytest.raises(Rejected) as e:
        anorm(mf.mp4_box(), "aac")
    assert e.value.code == "unsupported_media" and "'aac'" in e.value.reason
    with pytest.raises(Rejected) as e:
        anorm(mf.mp4_box(), "mp3")
    assert e.value.code == "unsupported_media" and "MP4" in e.value.reason
    with pytest.raises(Rejected) as e:
        anorm(mf.audio("wav"), "mp3")
    assert e.value.code == "media_type_mismatch" and "bytes are wav" in e.value.reason


def test_sample_rate_limits_and_corrupt_audio() -> None:
    with pytest.raises(Rejected) as e:
        anorm(mf.audio("wav", rate=4000, channels=1), "wav")
    assert e.value.code == "invalid_audio" and "4000 Hz" in e.value.reason
    with pytest.raises(Rejected) as e:
        anorm(b"fLaC" + bytes(200), "flac")
    assert e.value.code == "invalid_audio"


# ------------------------------------------------------------------------------ token rules


def test_qwen2_vl_tokens_follow_the_processor_grid() -> None:
    assert smart_resize(224, 224) == (224, 224)
    assert QWEN.image_tokens(224, 224) == 8 * 8 + 2
    assert QWEN.image_tokens(1000, 500) == (504 // 28) * (1008 // 28) + 2
    assert QWEN.image_tokens(10, 10) == 2 * 2 + 2  # upscaled to min_pixels (56x56)
    try:  # agree with the model family's own implementation where it is installed
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as hf
    except ImportError:
        return
    for h, w in [(480, 640), (1080, 1920), (37, 3000), (3000, 29)]:
        assert smart_resize(h, w) == hf(h, w, factor=28, min_pixels=56 * 56, max_pixels=14 * 14 * 4 * 1280)


def test_family_is_read_from_the_model_config() -> None:
    q = vision_rule({"model_type": "qwen2_vl"}, {"min_pixels": 3136, "max_pixels": 200704}, "llava")
    assert q.family == "qwen2_vl" and q.max_pixels == 200704
    assert (
        q.target_size(1920, 1080, 1_003_520, 2048)[0] * q.target_size(1920, 1080, 1_003_520, 2048)[1]
        <= 200704
    )
    ll = vision_rule(
        {"model_type": "llava", "vision_config": {"image_size": 336, "patch_size": 14}}, {}, "qwen2_vl"
    )
    assert ll.family == "llava" and ll.image_tokens(1920, 1080) == 576 == ll.image_tokens(50, 50)
    assert min(ll.target_size(1920, 1080, 1_003_520, 2048)) == 336  # shortest edge is all CLIP keeps
    assert vision_rule({"model_type": "llama"}, {}, "qwen2_vl") == VisionRule("qwen2_vl", max_pixels=1003520)
