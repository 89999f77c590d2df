"""The Multimodal preprocessing section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from shared.runtime.config.base import Section


class MediaSettings(Section):
    """Images and audio in content parts: what preprocess accepts, how it normalises and stores them (issue 7)."""

    title: ClassVar[str] = "Multimodal preprocessing"

    media_max_images: int = Field(default=8, ge=0, le=256, description="Images accepted in one request")
    media_max_audio: int = Field(default=2, ge=0, le=64, description="Audio clips accepted in one request")
    media_image_max_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Largest encoded image accepted (bytes)"
    )
    media_image_max_input_pixels: int = Field(
        default=40_000_000,
        ge=1,
        description="Largest width*height an image header may declare; checked before decoding (bombs)",
    )
    media_image_max_pixels: int = Field(
        default=1_003_520,
        ge=784,
        description="Images are shrunk (aspect kept) to at most this many pixels, or less if the model's family says so",
    )
    media_image_max_side: int = Field(
        default=2048, ge=28, description="Images are shrunk (aspect kept) so no side exceeds this"
    )
    media_image_encoding: Literal["png", "jpeg", "webp"] = Field(
        default="jpeg",
        description="Format normalised images are stored in, metadata stripped (jpeg: quality 92; png/webp: lossless, slower)",
    )
    media_image_token_family: Literal["qwen2_vl", "llava"] = Field(
        default="qwen2_vl",
        description="Image token rule for models whose config names no vision family (docs/multimodal.md)",
    )
    media_audio_max_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Largest encoded audio clip accepted (bytes)"
    )
    media_audio_max_seconds: float = Field(default=30.0, gt=0, description="Longest audio clip accepted")
    media_audio_min_rate: int = Field(
        default=8000, ge=1000, description="Lowest input sample rate accepted (Hz)"
    )
    media_audio_max_rate: int = Field(
        default=96000, ge=8000, description="Highest input sample rate accepted (Hz)"
    )
    media_audio_tokens_per_s: float = Field(
        default=25.0,
        gt=0,
        description="Audio tokens per second for models whose config names no audio family (Whisper-style encoders: 25)",
    )
    media_store_prefix: str = Field(
        default="media/",
        pattern=r"^[a-z0-9][a-z0-9_-]*/$",
        description="Object-store prefix of normalised media (content-addressed by sha256)",
    )
    media_object_prefixes: list[str] = Field(
        default_factory=lambda: ["media/", "uploads/{tenant}/"],
        description="JSON list of object-store prefixes a request may reference as s3://<bucket>/<key> ({tenant} = the caller)",
    )
    media_decode_concurrency: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Media parts decoded at once per preprocess process (bounds memory: each may hold a max-size image)",
    )
    media_remote_fetch: bool = Field(
        default=False,
        description="Allow http(s) image URLs (fetched with SY_MEDIA_IMAGE_MAX_BYTES and the time limit below)",
    )
    media_remote_timeout_s: float = Field(
        default=5.0, gt=0, le=120, description="Whole-download time limit of one remote image"
    )
    media_remote_allow_private: bool = Field(
        default=False, description="Allow remote URLs that resolve to loopback/private addresses (tests only)"
    )
