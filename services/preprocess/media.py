"""Untrusted image and audio bytes in, normalised bytes out, or `Rejected` with a reason.

Plain functions (no Kafka, no storage): the stage in `media_stage.py` calls them in a thread.
Order matters for safety: the format is sniffed from magic bytes (never trusted from the declared
mime), the pixel count is read from the header by our own parser and checked before any decoder
allocates a pixel, Pillow opens only the sniffed format, and truncated data is an error, not a
grey image. Output images are RGB, shrunk to the model's budget, rebuilt from pixels only (no
EXIF, ICC, text chunks), and re-encoded. Audio is in `audio.py`.
"""

from __future__ import annotations

import base64
import binascii
import io
import struct
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image, ImageFile, ImageOps

from shared.runtime.envelope import Rejected

ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated image is refused, never padded with grey

TargetSize = Callable[[int, int], tuple[int, int]]
"""(width, height) -> the size to store: the model family's budget and the deployment's limits."""

IMAGE_MIMES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
MIME_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "image/x-png": "image/png"}


class MediaError:
    """Stable error codes of refused media (the reason says what exactly)."""

    INVALID_IMAGE = "invalid_image"
    INVALID_AUDIO = "invalid_audio"
    UNSUPPORTED_MEDIA = "unsupported_media"
    MIME_MISMATCH = "media_type_mismatch"
    TOO_LARGE = "media_too_large"
    TOO_MANY = "too_many_media"
    FETCH_FAILED = "media_fetch_failed"


def refuse(code: str, reason: str, status: int = 400) -> Rejected:
    return Rejected(code, reason, status)


# ------------------------------------------------------------------------------ data URLs


def parse_data_url(url: str, max_bytes: int) -> tuple[str, bytes]:
    """`data:<mime>;base64,<data>` -> (declared mime, bytes); refuses other encodings and oversize."""
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:"):
        raise refuse(MediaError.INVALID_IMAGE, "malformed data URL (expected data:<mime>;base64,<data>)")
    params = head[5:].split(";")
    mime = params[0].strip().lower()
    if "base64" not in (p.strip().lower() for p in params[1:]):
        raise refuse(MediaError.INVALID_IMAGE, "data URL must be base64-encoded")
    return mime, b64decode(payload, max_bytes, "image")


def b64decode(payload: str, max_bytes: int, what: str) -> bytes:
    # Check the size from the text length first: never decode a payload we would refuse.
    approx = len(payload) * 3 // 4
    if approx > max_bytes + 3:
        raise refuse(
            MediaError.TOO_LARGE, f"{what} is about {approx} bytes, over the limit of {max_bytes}", 413
        )
    try:
        data = base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        code = MediaError.INVALID_IMAGE if what == "image" else MediaError.INVALID_AUDIO
        raise refuse(code, f"{what} is not valid base64: {exc}") from None
    if len(data) > max_bytes:
        raise refuse(MediaError.TOO_LARGE, f"{what} is {len(data)} bytes, over the limit of {max_bytes}", 413)
    if not data:
        code = MediaError.INVALID_IMAGE if what == "image" else MediaError.INVALID_AUDIO
        raise refuse(code, f"{what} is empty")
    return data


# ------------------------------------------------------------------------------ images


def sniff_image(data: bytes) -> str | None:
    """Pillow format name from magic bytes, or None for anything we do not accept."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def sniff_audio(data: bytes) -> str | None:
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"OggS":
        return "ogg"
    if data[:3] == b"ID3" or (len(data) >= 2 and data[0] == 0xFF and (data[1] & 0xE0) == 0xE0):
        return "mp3"
    return None


def describe_magic(data: bytes) -> str:
    """A name for what the bytes look like, for error messages."""
    fmt = sniff_image(data) or sniff_audio(data)
    if fmt:
        return str(fmt)
    if data[4:8] == b"ftyp":
        return "an MP4/ISO media container"
    if data[:2] == b"BM":
        return "BMP"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF"
    if data.lstrip()[:1] in (b"<", b"{"):
        return "text"
    return f"unknown (starts with {data[:8].hex()})"


def image_header_size(data: bytes, fmt: str) -> tuple[int, int]:
    """(width, height) as the header declares them, read without decoding any pixel data."""
    try:
        if fmt == "PNG":
            if data[12:16] != b"IHDR":
                raise ValueError("first chunk is not IHDR")
            w, h = struct.unpack(">II", data[16:24])
            return w, h
        if fmt == "GIF":
            w, h = struct.unpack("<HH", data[6:10])
            return w, h
        if fmt == "WEBP":
            return _webp_size(data)
        if fmt == "JPEG":
            return _jpeg_size(data)
    except (struct.error, IndexError) as exc:
        raise ValueError(f"{fmt} header is truncated") from exc
    raise ValueError(f"no header parser for {fmt}")


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L":
        if data[20] != 0x2F:
            raise ValueError("bad VP8L signature")
        b = int.from_bytes(data[21:25], "little")
        return (b & 0x3FFF) + 1, ((b >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            raise ValueError("bad VP8 start code")
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    raise ValueError(f"unknown WebP chunk {chunk!r}")


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise ValueError("JPEG marker expected")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if marker in _SOF:
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return w, h
        if marker == 0xDA:
            break
        i += 2 + length
    raise ValueError("no JPEG frame header (SOF) before the image data")


@dataclass(frozen=True)
class NormalImage:
    data: bytes
    mime: str
    width: int
    height: int
    source_format: str
    source_width: int
    source_height: int


def normalize_image(
    data: bytes,
    declared_mime: str | None,
    *,
    max_input_pixels: int,
    target: TargetSize,
    encoding: str = "png",
) -> NormalImage:
    """Validate and re-encode one image; every refusal is a `Rejected` with the exact reason."""
    fmt = sniff_image(data)
    if fmt is None:
        raise refuse(
            MediaError.UNSUPPORTED_MEDIA,
            f"image bytes are {describe_magic(data)}; accepted: PNG, JPEG, WebP, GIF",
            415,
        )
    if declared_mime is not None:
        declared = MIME_ALIASES.get(declared_mime, declared_mime)
        if declared != IMAGE_MIMES[fmt]:
            raise refuse(
                MediaError.MIME_MISMATCH,
                f"declared {declared_mime or 'no type'} but the bytes are {fmt} ({IMAGE_MIMES[fmt]})",
            )
    try:
        w, h = image_header_size(data, fmt)
    except ValueError as exc:
        raise refuse(MediaError.INVALID_IMAGE, f"corrupt {fmt}: {exc}") from None
    if w <= 0 or h <= 0:
        raise refuse(MediaError.INVALID_IMAGE, f"corrupt {fmt}: header declares {w}x{h}")
    if w * h > max_input_pixels:
        raise refuse(
            MediaError.TOO_LARGE,
            f"{fmt} header declares {w}x{h} = {w * h} pixels, over the limit of {max_input_pixels} "
            "(refused before decoding)",
            413,
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=[fmt])
            if img.size != (w, h):
                raise ValueError(f"header parsers disagree: {img.size} vs {(w, h)}")
            tw, th = target(w, h)
            if fmt == "JPEG" and (tw, th) != (w, h):
                img.draft("RGB", (tw, th))  # DCT scaling: decode big JPEGs at a fraction of the cost
            img.load()  # first frame only for animated GIF/WebP
            img = ImageOps.exif_transpose(img)
            rgb = _to_rgb(img)
    except Rejected:
        raise
    except (OSError, SyntaxError, ValueError, EOFError, struct.error, Image.DecompressionBombError,
            Image.DecompressionBombWarning, MemoryError, IndexError, ZeroDivisionError) as exc:  # fmt: skip
        raise refuse(MediaError.INVALID_IMAGE, f"corrupt or truncated {fmt}: {exc}") from None
    tw, th = target(*rgb.size)
    if (tw, th) != rgb.size:
        rgb = rgb.resize((tw, th), Image.Resampling.LANCZOS, reducing_gap=3.0)
    # Rebuild from pixels alone: no EXIF, ICC profile, XMP or text chunk can survive.
    clean = Image.frombytes("RGB", rgb.size, rgb.tobytes())
    out = io.BytesIO()
    if encoding == "jpeg":
        clean.save(out, "JPEG", quality=92, optimize=False)
    elif encoding == "webp":
        clean.save(out, "WEBP", lossless=True, method=0)
    else:
        clean.save(out, "PNG", compress_level=1)
    return NormalImage(out.getvalue(), f"image/{encoding}", tw, th, fmt, w, h)


def _to_rgb(img: Image.Image) -> Image.Image:
    if img.mode == "RGB":
        return img
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        bg = Image.new("RGB", rgba.size, (255, 255, 255))
        bg.paste(rgba, mask=rgba.getchannel("A"))
        return bg
    return img.convert("RGB")
