"""The audio encoder of `sy-vlm` (Whisper's layout, small), in plain torch on CPU.

16 kHz mono samples -> log-mel (Whisper's: 25 ms Hann window, 10 ms hop, log10, clamped to 8
below the clip's maximum, scaled) -> two 1-D convolutions (the second stride 2), sinusoidal
positions -> one pre-norm transformer block whose attention also sees a learned sink (so a
count of events does not depend on the clip's length) -> average pooling by 2 -> a two-layer
GELU projector into the decoder's embedding space (Qwen2-Audio's pooling and projector).

One embedding per `hop * stride * pool` = 640 samples: 25 per second, `ceil(samples / 640)` per
clip, the count preprocess charges (services/preprocess/families.py, family `sy_audio`). The
clip is zero-padded to that many 640-sample blocks first, so the count never depends on rounding.
No Triton import, so the main test suite checks it directly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

SAMPLE_RATE = 16000


def samples_per_token(cfg: dict[str, Any]) -> int:
    return int(cfg["hop_length"]) * int(cfg["conv_stride"]) * int(cfg["pool"])


def tokens_for(samples: int, cfg: dict[str, Any]) -> int:
    """Embeddings a clip of `samples` samples becomes: ceil(samples / 640), at least 1."""
    return max(1, -(-int(samples) // samples_per_token(cfg)))


def mel_filters(n_fft: int, n_mels: int, rate: int = SAMPLE_RATE) -> torch.Tensor:
    """[n_mels, n_fft // 2 + 1] triangular filters on the HTK mel scale, 0 Hz to Nyquist."""

    def mel(f: torch.Tensor) -> torch.Tensor:
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    def hz(m: torch.Tensor) -> torch.Tensor:
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    freqs = torch.linspace(0, rate / 2, n_fft // 2 + 1)
    edges = hz(torch.linspace(0.0, float(mel(torch.tensor(rate / 2.0))), n_mels + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None] - lower) / (centre - lower)
    down = (upper - freqs[None]) / (upper - centre)
    return torch.clamp(torch.minimum(up, down), min=0.0)


def log_mel(wave: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
    """[samples] float in [-1, 1], already padded to a multiple of 640 -> [n_mels, samples / hop]."""
    n_fft, hop = int(cfg["n_fft"]), int(cfg["hop_length"])
    spec = torch.stft(
        wave.float(), n_fft, hop, window=torch.hann_window(n_fft), center=True, return_complex=True
    )
    power = spec[:, : wave.shape[-1] // hop].abs() ** 2  # center=True adds one frame: drop it
    mel = mel_filters(n_fft, int(cfg["n_mels"])) @ power
    logm = torch.clamp(mel, min=1e-10).log10()
    logm = torch.maximum(logm, logm.max() - 8.0)
    return (logm + 4.0) / 4.0


def _sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's fixed positions: no learned table, so no length limit."""
    inc = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2))
    t = torch.arange(length)[:, None] * inv[None]
    return torch.cat([t.sin(), t.cos()], dim=1)


def encode(w: dict[str, torch.Tensor], wave: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
    """One clip's forward pass over named weights (plain tensors here, parameters when the
    builder trains them): [samples] float -> [ceil(samples / 640), text_hidden]."""
    block = samples_per_token(cfg)
    n = tokens_for(wave.shape[-1], cfg)
    wave = F.pad(wave.float(), (0, n * block - wave.shape[-1]))
    x = log_mel(wave, cfg)[None]  # [1, mels, frames]
    x = F.gelu(F.conv1d(x, w["audio.conv1.weight"], w["audio.conv1.bias"], padding=1))
    x = F.gelu(
        F.conv1d(x, w["audio.conv2.weight"], w["audio.conv2.bias"], stride=int(cfg["conv_stride"]), padding=1)
    )
    x = x[0].transpose(0, 1)  # [frames / stride, d]
    d = x.shape[-1]
    x = x + _sinusoids(x.shape[0], d).to(x.dtype)
    heads = int(cfg["heads"])
    h = F.layer_norm(x, (d,), w["audio.attn_norm.weight"], w["audio.attn_norm.bias"])
    h = torch.cat([w["audio.sink"], h], dim=0)  # the sink: attended to, never emitted
    q, k, v = F.linear(h, w["audio.qkv.weight"], w["audio.qkv.bias"]).chunk(3, dim=-1)
    q, k, v = (t.reshape(-1, heads, d // heads).transpose(0, 1) for t in (q, k, v))
    att = F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(-1, d)[1:]
    x = x + F.linear(att, w["audio.out.weight"], w["audio.out.bias"])
    h = F.layer_norm(x, (d,), w["audio.mlp_norm.weight"], w["audio.mlp_norm.bias"])
    h = F.gelu(F.linear(h, w["audio.fc1.weight"], w["audio.fc1.bias"]))
    x = x + F.linear(h, w["audio.fc2.weight"], w["audio.fc2.bias"])
    pool = int(cfg["pool"])
    x = F.avg_pool1d(x.transpose(0, 1)[None], pool, pool)[0].transpose(0, 1)  # [n, d]
    x = F.layer_norm(x, (d,), w["audio.post_norm.weight"], w["audio.post_norm.bias"])
    x = F.gelu(F.linear(x, w["audio_projector.linear_1.weight"], w["audio_projector.linear_1.bias"]))
    return F.linear(x, w["audio_projector.linear_2.weight"], w["audio_projector.linear_2.bias"])


class AudioTower:
    def __init__(self, model_dir: Path, dtype: torch.dtype = torch.float32) -> None:
        cfg = json.loads((model_dir / "config.json").read_text())
        self.cfg = cfg["audio_config"]
        self.audio_token = int(cfg.get("audio_token_index", cfg.get("image_token_index", 0)))
        self.dtype = dtype
        self.w = {k: v.float() for k, v in load_file(str(model_dir / "audio.safetensors")).items()}

    def tokens_for(self, samples: int) -> int:
        return tokens_for(samples, self.cfg)

    @torch.inference_mode()
    def embed(self, wave: torch.Tensor) -> torch.Tensor:
        """[samples] float32 at 16 kHz -> [tokens_for(samples), text_hidden]."""
        if wave.ndim != 1 or wave.numel() == 0:
            raise ValueError(f"audio must be one non-empty channel of samples, got shape {tuple(wave.shape)}")
        return encode(self.w, wave, self.cfg).to(self.dtype)
