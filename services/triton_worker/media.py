"""Images and audio for a multimodal model on Triton (sy-vlm), prepared as an HF processor would:
no Kafka here.

Preprocess already checked, normalised and stored each image and clip (claim check, `MediaRef`);
the worker fetches the blob. An image is centre-cropped and resized to the encoder's `image_size`
(CLIP's rule) and gets `(image_size / patch) ** 2` placeholder tokens; a clip (16 kHz mono PCM16
WAV, as preprocess stores it) is sent as float samples and gets `ceil(samples / 640)` placeholders
(25 per second, the `sy_audio` rule). Both are the counts preprocess charged. The placeholders go
right after BOS, images then clips, each in request order (LLaVA and Qwen2-Audio put the media
before the text of the turn; one position for all keeps the chat template untouched).
"""

from __future__ import annotations

import io
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image
from switchyard.v1.envelope_pb2 import MediaRef

from shared.runtime.envelope import Envelope, ErrorCode, Rejected
from shared.runtime.storage import ObjectNotFound, ObjectStore


@dataclass(frozen=True)
class VisionSpec:
    """What the worker needs of a VLM's config.json."""

    image_size: int
    patch: int
    image_token: int

    @property
    def tokens_per_image(self) -> int:
        return (self.image_size // self.patch) ** 2


@dataclass(frozen=True)
class AudioSpec:
    """What the worker needs of an audio model's config.json (audio_config)."""

    samples_per_token: int  # hop_length * conv_stride * pool: 640 for sy-vlm
    audio_token: int
    sample_rate: int = 16000

    def tokens_for(self, samples: int) -> int:
        return max(1, -(-samples // self.samples_per_token))


MediaInputs = list[tuple[str, np.ndarray, str]]
"""Extra model inputs for a multimodal request: (Triton input name, array, Triton dtype)."""


def image_array(data: bytes, size: int) -> np.ndarray:
    """[size, size, 3] uint8: the centre square, resized with bicubic filtering."""
    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB")
    w, h = rgb.size
    side = min(w, h)
    left, top = (w - side) // 2, (h - side) // 2
    square = rgb.crop((left, top, left + side, top + side)).resize((size, size), Image.Resampling.BICUBIC)
    return np.asarray(square, dtype=np.uint8)


def with_placeholders(
    ids: Sequence[int], images: int, spec: VisionSpec, bos: int | None
) -> tuple[list[int], list[int]]:
    """Prompt ids with each image's placeholder span after BOS, and each span's first position."""
    at = 1 if bos is not None and ids and ids[0] == bos else 0
    span = spec.tokens_per_image
    offsets = [at + i * span for i in range(images)]
    return [*ids[:at], *([spec.image_token] * (span * images)), *ids[at:]], offsets


def audio_samples(data: bytes, rate: int = 16000) -> np.ndarray:
    """A stored clip (preprocess's output: mono PCM16 WAV at `rate`) as float32 in [-1, 1]."""
    try:
        with wave.open(io.BytesIO(data)) as w:
            if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, rate):
                raise ValueError(
                    f"{w.getnchannels()} channels, {8 * w.getsampwidth()} bit, {w.getframerate()} Hz"
                )
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    except (wave.Error, EOFError, ValueError) as exc:
        raise Rejected(
            ErrorCode.INVALID_REQUEST, f"stored audio is not {rate} Hz mono PCM16 WAV: {exc}"
        ) from None
    if pcm.size == 0:
        raise Rejected(ErrorCode.INVALID_REQUEST, "stored audio has no samples")
    return pcm.astype(np.float32) / 32768.0


async def _blob(store: ObjectStore, bucket: str, ref: MediaRef, what: str) -> bytes:
    key = ref.uri.removeprefix(f"s3://{bucket}/")
    try:
        return await store.get(key)
    except ObjectNotFound:
        raise Rejected(
            ErrorCode.INVALID_REQUEST, f"{what} {ref.uri} is no longer in object storage", 410
        ) from None


async def load_images(store: ObjectStore, bucket: str, refs: Sequence[MediaRef], size: int) -> np.ndarray:
    """The request's images as one [n, size, size, 3] uint8 array, in request order."""
    return np.stack([image_array(await _blob(store, bucket, ref, "image"), size) for ref in refs])


async def media_inputs(
    env: Envelope, ids: list[int], model: Any, store: ObjectStore, bucket: str
) -> tuple[list[int], MediaInputs | None]:
    """The prompt ids with each image's and clip's placeholders and the model's extra inputs,
    or Rejected: images for a model without an image encoder, audio without an audio encoder."""
    images = [m for m in env.media if m.modality == "image"]
    clips = [m for m in env.media if m.modality == "audio"]
    other = sorted({m.modality for m in env.media} - {"", "image", "audio"})
    if other:
        raise Rejected(ErrorCode.INVALID_REQUEST, f"Triton model {env.model!r} takes no {other} input")
    if not images and not clips:
        return ids, None
    bos = model.tokenizer.bos_token_id
    at = 1 if bos is not None and ids and ids[0] == bos else 0
    out: MediaInputs = []
    if images:
        if model.vision is None:
            raise Rejected(ErrorCode.INVALID_REQUEST, f"Triton model {env.model!r} takes no image input")
        pixels = await load_images(store, bucket, images, model.vision.image_size)
        ids, offsets = with_placeholders(ids, len(images), model.vision, bos)
        out += [("IMAGES", pixels, "UINT8"), ("IMAGE_OFFSETS", np.asarray(offsets, np.int32), "INT32")]
        at = offsets[-1] + model.vision.tokens_per_image
    if clips:
        spec: AudioSpec | None = getattr(model, "audio", None)
        if spec is None:
            raise Rejected(ErrorCode.INVALID_REQUEST, f"Triton model {env.model!r} takes no audio input")
        waves = [audio_samples(await _blob(store, bucket, ref, "audio"), spec.sample_rate) for ref in clips]
        offsets, spans = [], []
        for w in waves:
            offsets.append(at + sum(spans))
            spans.append(spec.tokens_for(len(w)))
        ids = [*ids[:at], *([spec.audio_token] * sum(spans)), *ids[at:]]
        out += [
            ("AUDIO", np.concatenate(waves).astype(np.float32), "FP32"),
            ("AUDIO_SAMPLES", np.asarray([len(w) for w in waves], np.int32), "INT32"),
            ("AUDIO_OFFSETS", np.asarray(offsets, np.int32), "INT32"),
        ]
    return ids, out
