"""The image encoder of `sy-vlm` (LLaVA's layout), in plain torch on CPU.

A ViT patch embedding over an `image_size` square (a `patch`-stride convolution, learned
positions, one pre-norm MLP block, a final norm) and LLaVA's two-layer GELU projector into the
decoder's embedding space: one embedding per patch, `(image_size / patch) ** 2` per image. The
caller (the Triton worker, like an HF processor) sends each image already cropped and resized to
`image_size` as uint8 RGB; normalisation (CLIP's mean/std) happens here. No Triton import, so the
main test suite checks it directly.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class VisionTower:
    def __init__(self, model_dir: Path, dtype: torch.dtype = torch.float32) -> None:
        cfg = json.loads((model_dir / "config.json").read_text())
        vc = cfg["vision_config"]
        self.image_size = int(vc["image_size"])
        self.patch = int(vc["patch_size"])
        self.tokens_per_image = (self.image_size // self.patch) ** 2
        self.image_token = int(cfg.get("image_token_index", 0))
        self.dtype = dtype
        self.w = {k: v.to(dtype) for k, v in load_file(str(model_dir / "vision.safetensors")).items()}

    @torch.inference_mode()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """[n, S, S, 3] uint8 -> [n, tokens_per_image, text_hidden] embeddings."""
        n, h, w, _ = images.shape
        if (h, w) != (self.image_size, self.image_size):
            raise ValueError(f"images must be {self.image_size}x{self.image_size}, got {w}x{h}")
        return encode(self.w, images, self.patch, self.dtype)


def encode(
    w: dict[str, torch.Tensor], images: torch.Tensor, patch: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The encoder's forward pass over named weights (plain tensors here, parameters when the
    builder trains them): [n, S, S, 3] uint8 -> [n, (S / patch) ** 2, text_hidden]."""
    mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
    x = images.permute(0, 3, 1, 2).float() / 255.0
    x = ((x - mean) / std).to(dtype)
    x = F.conv2d(x, w["vision.patch.weight"], w["vision.patch.bias"], stride=patch)
    x = x.flatten(2).transpose(1, 2) + w["vision.position"]  # [n, patches, d]
    d = x.shape[-1]
    h1 = F.layer_norm(x, (d,), w["vision.norm.weight"], w["vision.norm.bias"])
    h1 = F.gelu(F.linear(h1, w["vision.mlp.fc1.weight"], w["vision.mlp.fc1.bias"]))
    x = x + F.linear(h1, w["vision.mlp.fc2.weight"], w["vision.mlp.fc2.bias"])
    x = F.layer_norm(x, (d,), w["vision.post_norm.weight"], w["vision.post_norm.bias"])
    x = F.gelu(F.linear(x, w["projector.linear_1.weight"], w["projector.linear_1.bias"]))
    return F.linear(x, w["projector.linear_2.weight"], w["projector.linear_2.bias"])
