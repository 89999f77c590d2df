"""How many prompt tokens an image or an audio clip costs, per model family.

The rules follow the models' own processors, so the count made here (before any engine sees the
request) is the count the engine will make:

- **qwen2_vl** (Qwen2-VL, Qwen2.5-VL): the image is resized by `smart_resize` to multiples of
  `patch_size * merge_size` (14 * 2 = 28) within [min_pixels, max_pixels]; each 28x28 cell is one
  `<|image_pad|>` token, plus `<|vision_start|>` and `<|vision_end|>`: `(h/28) * (w/28) + 2`.
- **llava** (LLaVA-1.5): CLIP resizes the shortest edge to `image_size` (336) and centre-crops a
  square, so every image costs `(image_size / patch_size) ** 2` tokens (576), whatever its size.
- **audio** (Whisper-style encoders, e.g. Qwen2-Audio): 16 kHz, 100 mel frames per second, a
  stride-2 convolution and a stride-2 pooling: 25 tokens per second, rounded up; Whisper's own
  encoder (no pooling) is 50 per second.
- **sy_audio** (sy-vlm's audio encoder, shared/devstack/models/audio.py): read from the model's
  `audio_config`: `sample_rate / (hop_length * conv_stride * pool)` per second (16000 / 640 = 25),
  and a clip of n samples costs `ceil(n / 640)`, the count the encoder makes.

The family comes from the model's `config.json` (`model_type`); a model that names none (a text
model) gets the families named in the settings, so a request is still counted and then refused by
routing if no pool serves its modality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from shared.prepare import context_tokens, read_json

QWEN2_VL_TYPES = {"qwen2_vl", "qwen2_5_vl"}
LLAVA_TYPES = {"llava", "sy_vlm"}  # sy_vlm: LLaVA's layout, our encoder (shared/devstack/models/vlm.py)
AUDIO_TOKENS_PER_S = {"qwen2_audio": 25.0, "whisper": 50.0}


def smart_resize(
    height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56, max_pixels: int = 14 * 14 * 4 * 1280
) -> tuple[int, int]:
    """Qwen2-VL's resize rule (transformers' image_processing_qwen2_vl.smart_resize)."""
    if max(height, width) / max(1, min(height, width)) > 200:
        raise ValueError(f"aspect ratio over 200: {width}x{height}")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True)
class VisionRule:
    """One family's image budget: what size to store and what the image costs in tokens."""

    family: str
    max_pixels: int  # the model's own ceiling (its processor never feeds more)
    min_pixels: int = 56 * 56
    patch: int = 14
    merge: int = 2
    image_size: int = 336  # llava

    def target_size(self, width: int, height: int, max_pixels: int, max_side: int) -> tuple[int, int]:
        """Largest size, aspect kept, within the model's and the deployment's limits (never upscaled)."""
        limit = min(max_pixels, self.max_pixels)
        scale = min(1.0, math.sqrt(limit / (width * height)), max_side / max(width, height))
        if self.family == "llava":  # CLIP only looks at the shortest edge, down to image_size
            scale = min(scale, max(self.image_size / min(width, height), 0.0))
            scale = min(1.0, scale)
        if scale >= 1.0:
            return width, height
        return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))

    def image_tokens(self, width: int, height: int) -> int:
        if self.family == "llava":
            return (self.image_size // self.patch) ** 2
        factor = self.patch * self.merge
        h, w = smart_resize(height, width, factor, self.min_pixels, self.max_pixels)
        return (h // factor) * (w // factor) + 2


@dataclass(frozen=True)
class ModelMedia:
    """What preprocess needs to know about a model: its vision/audio rules and context length."""

    vision: VisionRule
    audio_tokens_per_s: float
    context_tokens: int | None


def default_vision(family: str) -> VisionRule:
    if family == "llava":
        return VisionRule("llava", max_pixels=336 * 336 * 4, patch=14, image_size=336)
    return VisionRule("qwen2_vl", max_pixels=14 * 14 * 4 * 1280)


def vision_rule(config: dict[str, Any], preproc: dict[str, Any], default_family: str) -> VisionRule:
    mtype = str(config.get("model_type", ""))
    vc = config.get("vision_config") or {}
    if mtype in QWEN2_VL_TYPES:
        size = preproc.get("size") or {}
        max_px = int(preproc.get("max_pixels") or size.get("longest_edge") or 14 * 14 * 4 * 1280)
        min_px = int(preproc.get("min_pixels") or size.get("shortest_edge") or 56 * 56)
        return VisionRule(
            "qwen2_vl",
            max_pixels=max_px,
            min_pixels=min_px,
            patch=int(preproc.get("patch_size") or vc.get("patch_size") or 14),
            merge=int(preproc.get("merge_size") or vc.get("spatial_merge_size") or 2),
        )
    if mtype in LLAVA_TYPES:
        size = int(vc.get("image_size") or 336)
        return VisionRule(
            "llava", max_pixels=size * size * 4, patch=int(vc.get("patch_size") or 14), image_size=size
        )
    return default_vision(default_family)


def audio_rate(config: dict[str, Any], default: float) -> float:
    mtype = str(config.get("model_type", ""))
    if mtype in AUDIO_TOKENS_PER_S:
        return AUDIO_TOKENS_PER_S[mtype]
    ac = config.get("audio_config") or {}
    if ac.get("model_type") == "sy_audio":
        try:
            per_token = int(ac["hop_length"]) * int(ac["conv_stride"]) * int(ac["pool"])
            return int(ac.get("sample_rate", 16000)) / per_token
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return default  # a malformed config: the default rule, not a crash on every request
    if ac.get("model_type") in AUDIO_TOKENS_PER_S:
        return AUDIO_TOKENS_PER_S[str(ac["model_type"])]
    return default


@lru_cache(maxsize=64)
def model_media(
    model_dir: Path, default_family: str, default_audio_rate: float, engine_limit: int | None
) -> ModelMedia:
    """Read the model's config.json / preprocessor_config.json once; `engine_limit` caps the context."""
    config = read_json(model_dir / "config.json")
    preproc = read_json(model_dir / "preprocessor_config.json")
    ctx = context_tokens(config, engine_limit)
    return ModelMedia(
        vision_rule(config, preproc, default_family), audio_rate(config, default_audio_rate), ctx
    )


def audio_tokens(duration_s: float, tokens_per_s: float) -> int:
    """ceil(duration * rate), at least 1; rounded first so that float error in an exact count
    (1920 samples / 16000 * 25 = 3.0000000000000004) does not charge one token more."""
    return max(1, math.ceil(round(duration_s * tokens_per_s, 6)))
