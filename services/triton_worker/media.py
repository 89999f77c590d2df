"""Images for a VLM on Triton (sy-vlm), prepared as an HF processor would: no Kafka here.

Preprocess already checked, normalised and stored each image (claim check, `MediaRef`); the
worker fetches the blob, crops the centre square and resizes it to the encoder's `image_size`
(CLIP's rule), and puts `(image_size / patch) ** 2` placeholder tokens per image in the prompt —
the count preprocess charged for it — right after BOS, images in request order (LLaVA puts the
image before the text of the turn; one position for all keeps the chat template untouched).
"""

from __future__ import annotations

import io
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


async def load_images(store: ObjectStore, bucket: str, refs: Sequence[MediaRef], size: int) -> np.ndarray:
    """The request's images as one [n, size, size, 3] uint8 array, in request order."""
    out = []
    for ref in refs:
        key = ref.uri.removeprefix(f"s3://{bucket}/")
        try:
            data = await store.get(key)
        except ObjectNotFound:
            raise Rejected(
                ErrorCode.INVALID_REQUEST, f"image {ref.uri} is no longer in object storage", 410
            ) from None
        out.append(image_array(data, size))
    return np.stack(out)


async def vision_inputs(
    env: Envelope, ids: list[int], model: Any, store: ObjectStore, bucket: str
) -> tuple[list[int], tuple[np.ndarray, list[int]] | None]:
    """The prompt ids with each image's placeholders and the pixels for the model, or Rejected:
    images for a model without an encoder, audio (no Triton model here takes it)."""
    refs = [m for m in env.media if m.modality == "image"]
    if any(m.modality not in ("", "image") for m in env.media):
        raise Rejected(ErrorCode.INVALID_REQUEST, f"Triton model {env.model!r} takes no audio input")
    if not refs:
        return ids, None
    if model.vision is None:
        raise Rejected(ErrorCode.INVALID_REQUEST, f"Triton model {env.model!r} takes no image input")
    ids, offsets = with_placeholders(ids, len(refs), model.vision, model.tokenizer.bos_token_id)
    return ids, (await load_images(store, bucket, refs, model.vision.image_size), offsets)
