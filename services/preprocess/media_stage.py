"""Media content parts -> normalised blobs in object storage + MediaRefs and token counts.

Two phases so that a refused request leaves nothing behind: `analyse` loads, checks and
normalises every part and counts its tokens (no writes); the caller then runs the text and
context-length checks; only then `commit` stores the blobs (content-addressed, claim check) and
rewrites the envelope. If a write fails half-way, the blobs this request created are deleted.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

import httpx
from switchyard.v1.envelope_pb2 import MediaRef

from shared.prepare import check_context, engine_limit
from shared.runtime.config import Settings
from shared.runtime.envelope import ContentPart, Envelope, ErrorCode, Rejected
from shared.runtime.storage import ObjectNotFound, ObjectStore, validate_key
from shared.runtime.telemetry import add_timing, get_logger

from .audio import NormalAudio, normalize_audio
from .families import ModelMedia, audio_tokens, model_media
from .media import (
    IMAGE_MIMES,
    MediaError,
    NormalImage,
    TargetSize,
    b64decode,
    image_header_size,
    normalize_image,
    parse_data_url,
    refuse,
    sniff_image,
)

log = get_logger(__name__)

EXT = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "audio/wav": "wav"}


@dataclass
class Pending:
    """One normalised part, not yet stored."""

    message_index: int
    part_index: int
    modality: Literal["image", "audio"]
    data: bytes
    mime: str
    sha256: str
    tokens: int
    width: int = 0
    height: int = 0
    duration_s: float = 0.0
    source: str = ""


@dataclass
class Analysis:
    items: list[Pending] = field(default_factory=list)
    image_tokens: int = 0
    audio_tokens: int = 0
    start_ns: int = 0
    end_ns: int = 0

    @property
    def modalities(self) -> set[str]:
        return {p.modality for p in self.items}


def media_parts(env: Envelope) -> list[tuple[int, int, ContentPart]]:
    return [
        (i, j, p)
        for i, m in enumerate(env.request.messages)
        for j, p in enumerate(m.parts)
        if p.type in ("image_url", "input_audio")
    ]


class MediaStage:
    def __init__(self, settings: Settings, store: ObjectStore) -> None:
        self.s = settings
        self.store = store
        # Decoding holds up to max_input_pixels * 4 bytes per part: bound how many run at once,
        # whatever the stage's in-flight limit (records still overlap their I/O).
        self._decode = asyncio.Semaphore(settings.media_decode_concurrency)

    # ------------------------------------------------------------------ phase 1: no writes
    def model(self, name: str) -> ModelMedia:
        return model_media(
            self.s.model_dir / name,
            self.s.media_image_token_family,
            self.s.media_audio_tokens_per_s,
            engine_limit(self.s, name),
        )

    async def analyse(self, env: Envelope) -> Analysis:
        """Load, validate and normalise every media part; Rejected with the part's path on refusal."""
        parts = media_parts(env)
        out = Analysis(start_ns=time.time_ns())
        if not parts:
            return out
        n_img = sum(p.type == "image_url" for _, _, p in parts)
        n_aud = len(parts) - n_img
        if n_img > self.s.media_max_images:
            raise refuse(
                MediaError.TOO_MANY, f"{n_img} images; at most {self.s.media_max_images} per request"
            )
        if n_aud > self.s.media_max_audio:
            raise refuse(
                MediaError.TOO_MANY, f"{n_aud} audio clips; at most {self.s.media_max_audio} per request"
            )
        self.check_pools(env.model, ({"image"} if n_img else set()) | ({"audio"} if n_aud else set()))
        mm = self.model(env.model)
        for i, j, part in parts:
            where = f"request.messages[{i}].parts[{j}]"
            try:
                item = await self._one(env, i, j, part, mm)
            except Rejected as exc:
                raise Rejected(exc.code, f"{where}: {exc.reason}", exc.http_status) from None
            out.items.append(item)
            if item.modality == "image":
                out.image_tokens += item.tokens
            else:
                out.audio_tokens += item.tokens
        out.end_ns = time.time_ns()
        return out

    def check_pools(self, model: str, needed: set[str]) -> None:
        """Refuse before any decoding when no configured pool serves the model with these modalities."""
        pools = [p for p in self.s.pools if model in p.models]
        if pools and not any(needed <= p.modalities_for(model) for p in pools):
            have = {p.name: sorted(p.modalities_for(model)) for p in pools}
            raise Rejected(
                ErrorCode.NO_POOL,
                f"no pool for model {model!r} accepts {sorted(needed | {'text'})}; pools: {have}",
                404,
            )

    async def _one(self, env: Envelope, i: int, j: int, part: ContentPart, mm: ModelMedia) -> Pending:
        if part.type == "image_url":
            declared, data = await self._image_bytes(env.tenant, part.image_url.url)
            vision = mm.vision

            def target(w: int, h: int) -> tuple[int, int]:
                return vision.target_size(w, h, self.s.media_image_max_pixels, self.s.media_image_max_side)

            img = self._already_normal(part.image_url.url, data, target)
            if img is None:
                async with self._decode:
                    img = await asyncio.to_thread(
                        normalize_image,
                        data,
                        declared,
                        max_input_pixels=self.s.media_image_max_input_pixels,
                        target=target,
                        encoding=self.s.media_image_encoding,
                    )
            try:
                tokens = vision.image_tokens(img.width, img.height)
            except ValueError as exc:
                raise refuse(MediaError.INVALID_IMAGE, str(exc)) from None
            return Pending(
                i, j, "image", img.data, img.mime, hashlib.sha256(img.data).hexdigest(), tokens,
                width=img.width, height=img.height,
                source=f"{img.source_format} {img.source_width}x{img.source_height}",
            )  # fmt: skip
        raw = b64decode(part.input_audio.data, self.s.media_audio_max_bytes, "audio")
        async with self._decode:
            aud: NormalAudio = await asyncio.to_thread(
                normalize_audio,
                raw,
                part.input_audio.format,
                max_seconds=self.s.media_audio_max_seconds,
                min_rate=self.s.media_audio_min_rate,
                max_rate=self.s.media_audio_max_rate,
            )
        return Pending(
            i, j, "audio", aud.data, aud.mime, hashlib.sha256(aud.data).hexdigest(),
            audio_tokens(aud.duration_s, mm.audio_tokens_per_s), duration_s=aud.duration_s,
            source=f"{aud.source_format} {aud.source_rate} Hz x{aud.source_channels}",
        )  # fmt: skip

    def _already_normal(self, url: str, data: bytes, target: TargetSize) -> NormalImage | None:
        """One of our own stored outputs, referenced again: reuse it as is (a lossy re-encode would
        change its bytes and so its address) when it already fits this model's budget."""
        name = url.removeprefix(f"s3://{self.s.s3_bucket}/{self.s.media_store_prefix}")
        if name == url or hashlib.sha256(data).hexdigest() != name.rpartition("/")[2].partition(".")[0]:
            return None
        fmt = sniff_image(data)
        if fmt is None or IMAGE_MIMES[fmt] != f"image/{self.s.media_image_encoding}":
            return None
        w, h = image_header_size(data, fmt)
        if target(w, h) != (w, h):
            return None
        return NormalImage(data, IMAGE_MIMES[fmt], w, h, fmt, w, h)

    async def _image_bytes(self, tenant: str, url: str) -> tuple[str | None, bytes]:
        limit = self.s.media_image_max_bytes
        if url.startswith("data:"):
            return parse_data_url(url, limit)
        scheme = urlsplit(url).scheme.lower()
        if scheme == "s3":
            return await self._object_bytes(tenant, url, limit)
        if scheme in ("http", "https"):
            if not self.s.media_remote_fetch:
                raise refuse(
                    MediaError.UNSUPPORTED_MEDIA,
                    "remote image URLs are disabled on this deployment; send a data: URL or an s3:// object URI",
                )
            return await fetch_remote(
                url, limit, self.s.media_remote_timeout_s, self.s.media_remote_allow_private
            )
        raise refuse(
            MediaError.UNSUPPORTED_MEDIA, f"image_url scheme {scheme or '(none)'!r} is not supported"
        )

    async def _object_bytes(self, tenant: str, url: str, limit: int) -> tuple[str | None, bytes]:
        u = urlsplit(url)
        key = u.path.lstrip("/")
        if u.netloc != self.s.s3_bucket:
            raise refuse(MediaError.FETCH_FAILED, f"bucket {u.netloc!r} is not this deployment's", 403)
        prefixes = [p.replace("{tenant}", tenant) for p in self.s.media_object_prefixes]
        try:
            validate_key(key)
        except ValueError as exc:
            raise refuse(MediaError.FETCH_FAILED, f"bad object key: {exc}") from None
        if not any(key.startswith(p) for p in prefixes):
            raise refuse(MediaError.FETCH_FAILED, f"object {key!r} is outside the readable prefixes", 403)
        info = await self.store.stat(key)
        if info is None:
            raise refuse(MediaError.FETCH_FAILED, f"object {key!r} does not exist", 404)
        if info.size > limit:
            raise refuse(MediaError.TOO_LARGE, f"object is {info.size} bytes, over the limit of {limit}", 413)
        try:
            data = await self.store.get(key)
        except ObjectNotFound:
            raise refuse(MediaError.FETCH_FAILED, f"object {key!r} does not exist", 404) from None
        ct = info.content_type.lower()
        return (ct if ct.startswith("image/") else None), data

    # ------------------------------------------------------------------ phase 2: writes
    def key(self, p: Pending) -> str:
        return f"{self.s.media_store_prefix}{p.sha256[:2]}/{p.sha256}.{EXT[p.mime]}"

    def uri(self, key: str) -> str:
        return f"s3://{self.s.s3_bucket}/{key}"

    async def commit(self, env: Envelope, a: Analysis) -> None:
        """Store the blobs (skipping ones already there) and put MediaRefs in the envelope."""
        if not a.items:
            return
        start = time.time_ns()
        created: list[str] = []
        try:
            for p in a.items:
                key = self.key(p)
                if await self.store.stat(key) is None:
                    created.append(key)  # before the put: a failed put may leave a temp to clean
                    await self.store.put(key, p.data, content_type=p.mime)
        except BaseException:
            for key in created:
                try:
                    await self.store.delete(key)
                except Exception as exc:  # noqa: BLE001 - report, keep deleting the others
                    log.warning("media cleanup failed", key=key, error=str(exc))
            raise
        for p in a.items:
            uri = self.uri(self.key(p))
            env.media.append(
                MediaRef(
                    uri=uri, mime=p.mime, sha256=p.sha256, size_bytes=len(p.data), width=p.width,
                    height=p.height, duration_s=p.duration_s, modality=p.modality,
                    part_index=p.part_index, message_index=p.message_index,
                )
            )  # fmt: skip
            part = env.request.messages[p.message_index].parts[p.part_index]
            if p.modality == "image":
                part.image_url.url = uri  # the claim check replaces the inline bytes
            else:
                part.input_audio.data = ""
                part.input_audio.format = "wav"
        env.tokens.image = a.image_tokens
        env.tokens.audio = a.audio_tokens
        env.tokens.total = env.tokens.prompt_text + a.image_tokens + a.audio_tokens
        add_timing(
            env, "media", a.start_ns, time.time_ns(), parent="preprocess",
            images=sum(p.modality == "image" for p in a.items),
            audio=sum(p.modality == "audio" for p in a.items),
            image_tokens=a.image_tokens, audio_tokens=a.audio_tokens,
            stored=len(created), store_ms=f"{(time.time_ns() - start) / 1e6:.2f}",
        )  # fmt: skip

    def check_context(self, env: Envelope, a: Analysis, text_tokens: int | None) -> None:
        """Refuse a prompt that cannot fit the model's context before it reaches a worker."""
        if text_tokens is None:
            return
        detail = f"{text_tokens} text"
        if a.image_tokens:
            detail += f" + {a.image_tokens} image"
        if a.audio_tokens:
            detail += f" + {a.audio_tokens} audio"
        check_context(
            text_tokens + a.image_tokens + a.audio_tokens, self.model(env.model).context_tokens, detail
        )


async def fetch_remote(
    url: str, limit: int, timeout_s: float, allow_private: bool
) -> tuple[str | None, bytes]:
    """GET one image with a byte and a whole-download time limit; no redirects, no private hosts."""
    u = urlsplit(url)
    host = u.hostname or ""
    if not host:
        raise refuse(MediaError.FETCH_FAILED, "remote URL has no host")
    if not allow_private:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, u.port or 443, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise refuse(MediaError.FETCH_FAILED, f"cannot resolve {host!r}: {exc}") from None
        for info in infos:
            ip = ipaddress.ip_address(info[4][0])
            if not ip.is_global:
                raise refuse(MediaError.FETCH_FAILED, f"{host!r} resolves to a non-public address", 403)
    try:
        async with asyncio.timeout(timeout_s), httpx.AsyncClient(follow_redirects=False) as client:
            async with client.stream("GET", url) as resp:
                if resp.status_code != 200:
                    raise refuse(MediaError.FETCH_FAILED, f"remote image answered HTTP {resp.status_code}")
                declared = resp.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > limit:
                    raise refuse(
                        MediaError.TOO_LARGE,
                        f"remote image is {declared} bytes, over the limit of {limit}",
                        413,
                    )
                buf = bytearray()
                async for chunk in resp.aiter_bytes():
                    buf += chunk
                    if len(buf) > limit:
                        raise refuse(
                            MediaError.TOO_LARGE, f"remote image is over the limit of {limit} bytes", 413
                        )
                ct = resp.headers.get("content-type", "").split(";")[0].strip().lower()
    except TimeoutError:
        raise refuse(MediaError.FETCH_FAILED, f"remote image took longer than {timeout_s:g} s", 504) from None
    except httpx.HTTPError as exc:
        raise refuse(MediaError.FETCH_FAILED, f"remote image fetch failed: {exc}") from None
    if not buf:
        raise refuse(MediaError.INVALID_IMAGE, "remote image is empty")
    return (ct if ct.startswith("image/") else None), bytes(buf)
