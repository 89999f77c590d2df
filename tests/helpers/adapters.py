"""Tiny LoRA adapters and a fake base model for the registry tests (numpy + safetensors only)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
from safetensors.numpy import save

BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}
FEATURES = {  # (in, out) for BASE: head_dim 32
    "q_proj": (128, 128),
    "k_proj": (128, 128),
    "v_proj": (128, 128),
    "o_proj": (128, 128),
    "gate_proj": (128, 256),
    "up_proj": (128, 256),
    "down_proj": (256, 128),
}


def write_base_model(models_dir: Path, name: str = "sy-tiny") -> Path:
    d = models_dir / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(BASE))
    return d


def tensor_name(layer: int, module: str, ab: str) -> str:
    parent = "mlp" if module in ("gate_proj", "up_proj", "down_proj") else "self_attn"
    return f"base_model.model.model.layers.{layer}.{parent}.{module}.lora_{ab}.weight"


def adapter_tensors(
    r: int = 8, modules: tuple[str, ...] = ("q_proj", "v_proj"), layers: int = 2, seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for layer in range(layers):
        for m in modules:
            fin, fout = FEATURES[m]
            out[tensor_name(layer, m, "A")] = rng.standard_normal((r, fin), dtype=np.float32)
            out[tensor_name(layer, m, "B")] = np.zeros((fout, r), dtype=np.float32)
    return out


def adapter_config(
    r: int = 8, modules: tuple[str, ...] = ("q_proj", "v_proj"), base: str = "sy-tiny", **extra: object
) -> bytes:
    cfg = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": r,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "target_modules": list(modules),
        "base_model_name_or_path": base,
        "bias": "none",
    }
    cfg.update(extra)
    return json.dumps(cfg).encode()


def make_adapter(
    r: int = 8, modules: tuple[str, ...] = ("q_proj", "v_proj"), seed: int = 0, base: str = "sy-tiny"
) -> tuple[bytes, bytes]:
    """(adapter_model.safetensors bytes, adapter_config.json bytes)."""
    return save(adapter_tensors(r, modules, seed=seed)), adapter_config(r, modules, base)


def pickle_bytes() -> bytes:
    return pickle.dumps({"weight": [1.0, 2.0]}, protocol=4)


def safetensors_with_header(header: dict[str, object] | bytes, data: bytes = b"") -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + data


def sha256(b: bytes) -> str:
    import hashlib

    return hashlib.sha256(b).hexdigest()
