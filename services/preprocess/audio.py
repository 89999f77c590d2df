"""Untrusted audio bytes in, 16 kHz mono PCM16 WAV out, or `Rejected` with a reason.

The codec is sniffed from magic bytes and must match the declared format; a WAV header is read
by our own parser first, so a header declaring an hour, or more samples than the file holds, is
refused before libsndfile decodes anything; decoding reads at most one frame past the limit.
"""

from __future__ import annotations

import io
import math
import re
import struct
from dataclasses import dataclass

import numpy as np

from shared.runtime.envelope import Rejected

from .media import MediaError, describe_magic, refuse, sniff_audio

AUDIO_RATE = 16000
AUDIO_FORMATS = {"wav", "mp3", "flac", "ogg"}


# A WAV writer that does not know the length yet (a stream, a pipe) leaves one of these as the
# data chunk's size; such a file is read up to the limit like any other.
WAV_UNKNOWN_LENGTH = (0, 0xFFFFFFFF)


@dataclass(frozen=True)
class WavHeader:
    rate: int
    channels: int
    block_align: int  # bytes per frame
    declared_bytes: int  # the data chunk's size field
    present_bytes: int  # what the file holds after the data chunk's header


def wav_header(data: bytes) -> WavHeader | None:
    """The fmt and data chunks of a RIFF/WAVE file, read without decoding; None when either is
    missing (libsndfile then says what is wrong)."""
    fmt: tuple[int, int, int] | None = None
    i = 12
    while i + 8 <= len(data):
        kind, size = data[i : i + 4], struct.unpack("<I", data[i + 4 : i + 8])[0]
        if kind == b"fmt " and size >= 16 and i + 24 <= len(data):
            _, channels, rate, _, block_align = struct.unpack("<HHIIH", data[i + 8 : i + 22])
            fmt = (rate, channels, block_align)
        elif kind == b"data":
            if fmt is None:
                return None
            return WavHeader(*fmt, declared_bytes=size, present_bytes=len(data) - i - 8)
        i += 8 + size + (size & 1)
    return None


def check_wav_header(data: bytes, max_seconds: float) -> None:
    """Refuse a WAV whose header declares more audio than the limit (before decoding) or more
    samples than the file holds (a truncated or lying header, which libsndfile would read as a
    shorter clip without a word)."""
    h = wav_header(data)
    if h is None or h.declared_bytes in WAV_UNKNOWN_LENGTH or h.rate <= 0 or h.block_align <= 0:
        return
    declared_s = h.declared_bytes / h.block_align / h.rate
    if declared_s > max_seconds:
        raise refuse(
            MediaError.TOO_LARGE,
            f"WAV header declares {declared_s:.2f} s of audio, over the limit of {max_seconds:g} s "
            "(refused before decoding)",
            413,
        )
    if h.declared_bytes > h.present_bytes:
        raise refuse(
            MediaError.INVALID_AUDIO,
            f"truncated WAV: the header declares {h.declared_bytes} bytes of samples "
            f"({declared_s:.2f} s), the file holds {max(0, h.present_bytes)}",
        )


def _decode_error(exc: BaseException) -> str:
    """libsndfile's message without the repr of our in-memory buffer."""
    return re.sub(r"^Error opening <[^>]*>: ", "", str(exc))


@dataclass(frozen=True)
class NormalAudio:
    data: bytes
    mime: str
    duration_s: float
    source_format: str
    source_rate: int
    source_channels: int


def normalize_audio(
    data: bytes,
    declared_format: str,
    *,
    max_seconds: float,
    min_rate: int,
    max_rate: int,
    max_channels: int = 8,
) -> NormalAudio:
    """Decode, check duration and rate (from the header first), resample to 16 kHz mono PCM16 WAV."""
    import soundfile as sf
    import soxr

    declared = (declared_format or "").strip().lower()
    if declared not in AUDIO_FORMATS:
        raise refuse(
            MediaError.UNSUPPORTED_MEDIA,
            f"audio format {declared_format!r} is not supported; accepted: {sorted(AUDIO_FORMATS)}",
            415,
        )
    fmt = sniff_audio(data)
    if fmt is None:
        raise refuse(
            MediaError.UNSUPPORTED_MEDIA,
            f"audio bytes are {describe_magic(data)}; accepted codecs: WAV, MP3, FLAC, Ogg (Vorbis/Opus)",
            415,
        )
    if fmt != declared:
        raise refuse(MediaError.MIME_MISMATCH, f"declared format {declared!r} but the bytes are {fmt}")
    if fmt == "wav":
        check_wav_header(data, max_seconds)
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            rate, channels, frames = f.samplerate, f.channels, f.frames
            if not min_rate <= rate <= max_rate:
                raise refuse(
                    MediaError.INVALID_AUDIO,
                    f"sample rate {rate} Hz outside the accepted {min_rate}-{max_rate} Hz",
                )
            if not 1 <= channels <= max_channels:
                raise refuse(MediaError.INVALID_AUDIO, f"{channels} channels; at most {max_channels}")
            limit = math.floor(max_seconds * rate)
            if frames > limit:
                raise refuse(
                    MediaError.TOO_LARGE,
                    f"audio is {frames / rate:.2f} s, over the limit of {max_seconds:g} s",
                    413,
                )
            # Read at most one frame past the limit: a header that lies about its length cannot
            # make us decode more than the limit allows.
            pcm = f.read(frames=limit + 1, dtype="float32", always_2d=True)
    except Rejected:
        raise
    except (sf.LibsndfileError, RuntimeError, ValueError, TypeError, OSError, EOFError) as exc:
        raise refuse(MediaError.INVALID_AUDIO, f"cannot decode {fmt}: {_decode_error(exc)}") from None
    if len(pcm) > limit:
        raise refuse(MediaError.TOO_LARGE, f"audio is longer than the limit of {max_seconds:g} s", 413)
    if len(pcm) == 0:
        raise refuse(MediaError.INVALID_AUDIO, f"{fmt} decodes to no samples")
    mono = pcm.mean(axis=1)
    if rate != AUDIO_RATE:
        mono = soxr.resample(mono, rate, AUDIO_RATE, quality="HQ")
    pcm16 = (np.clip(mono, -1.0, 1.0) * 32767.0).round().astype("<i2")
    out = io.BytesIO()
    sf.write(out, pcm16, AUDIO_RATE, format="WAV", subtype="PCM_16")
    return NormalAudio(out.getvalue(), "audio/wav", len(pcm16) / AUDIO_RATE, fmt, rate, channels)
