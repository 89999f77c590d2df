"""Real media files made in the tests (Pillow, libsndfile): nothing is checked in."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import numpy as np
import soundfile as sf
from PIL import Image, PngImagePlugin


def picture(w: int, h: int, mode: str = "RGB") -> Image.Image:
    """A gradient with a marker block, so resizes and rotations are visible in the pixels."""
    x = np.linspace(0, 255, w, dtype=np.float32)[None, :].repeat(h, 0)
    y = np.linspace(0, 255, h, dtype=np.float32)[:, None].repeat(w, 1)
    rgb = np.stack([x, y, 255 - x], axis=2).astype(np.uint8)
    rgb[: max(1, h // 4), : max(1, w // 4)] = (255, 0, 0)
    img = Image.fromarray(rgb, "RGB")
    return img if mode == "RGB" else img.convert(mode)


def encode(img: Image.Image, fmt: str, **kw: object) -> bytes:
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def png_with_text(w: int, h: int) -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("Author", "secret-author-name")
    img = picture(w, h, "RGBA")
    return encode(img, "PNG", pnginfo=info)


def jpeg_with_exif(w: int, h: int, orientation: int = 6) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation  # Orientation: 6 = rotate 90° clockwise to display
    exif[0x010F] = "SecretCam"  # Make
    return encode(picture(w, h), "JPEG", exif=exif.tobytes(), quality=90)


def animated_gif(w: int, h: int) -> bytes:
    frames = [picture(w, h).convert("P"), Image.new("P", (w, h), 3)]
    b = io.BytesIO()
    frames[0].save(b, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return b.getvalue()


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bomb(w: int = 50_000, h: int = 50_000) -> bytes:
    """A valid PNG header declaring w x h pixels; its few data bytes would inflate to gigabytes."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    data = zlib.compress(b"\x00" * 65536, 9)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")


def jpeg_bomb(w: int = 60_000, h: int = 60_000) -> bytes:
    """A real JPEG whose frame header (SOF0) is patched to declare w x h."""
    data = bytearray(encode(picture(16, 16), "JPEG"))
    i = data.index(b"\xff\xc0")
    data[i + 5 : i + 9] = struct.pack(">HH", h, w)
    return bytes(data)


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def tone(seconds: float, rate: int = 44100, channels: int = 2) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    x = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    return np.stack([x] * channels, axis=1)


AUDIO_SUBTYPES = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "ogg": ("OGG", "VORBIS"),
                  "mp3": ("MP3", "MPEG_LAYER_III")}  # fmt: skip


def audio(fmt: str, seconds: float = 1.0, rate: int = 44100, channels: int = 2) -> bytes:
    container, subtype = AUDIO_SUBTYPES[fmt]
    b = io.BytesIO()
    sf.write(b, tone(seconds, rate, channels), rate, format=container, subtype=subtype)
    return b.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def mp4_box() -> bytes:
    """The start of an MP4/M4A (AAC) file: a codec we do not accept."""
    return struct.pack(">I", 24) + b"ftypM4A " + b"\x00\x00\x00\x00" + b"M4A mp42isom" + b"\x00" * 64
