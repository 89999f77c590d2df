"""Small LoRA adapters of a locally built base model (var/models/<base>), in PEFT's own layout:
adapter_config.json + adapter_model.safetensors, what the registry accepts and vLLM loads.

The weights are random (seeded), not trained: enough to see an adapter change the answers, to
exercise the registry, the adapter cache and vLLM's LoRA slots. `switchyard adapters build` and
the tests build them here.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

DEFAULT_TARGETS: tuple[str, ...] = ("q_proj", "v_proj")


def seed_of(name: str) -> int:
    """A stable seed per adapter name, so two names give two different adapters."""
    return zlib.crc32(name.encode()) % 2**31


def build_adapter(
    base_dir: Path,
    out_dir: Path,
    seed: int,
    rank: int = 8,
    target_modules: tuple[str, ...] = DEFAULT_TARGETS,
    scale: float = 0.5,
) -> Path:
    """A peft adapter with non-zero, seed-dependent weights (saved as peft saves it).

    The base is loaded with its weights when it has them; a base of only config.json (a test's
    fake) gives the same shapes from a randomly initialised model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if any(base_dir.glob("*.safetensors")) or (base_dir / "pytorch_model.bin").is_file():
        base = LlamaForCausalLM.from_pretrained(str(base_dir), torch_dtype=torch.float32)
    else:
        base = LlamaForCausalLM(LlamaConfig.from_pretrained(str(base_dir)))
    cfg = LoraConfig(
        r=rank,
        lora_alpha=rank,
        target_modules=list(target_modules),
        init_lora_weights=False,
        lora_dropout=0.0,
    )
    model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * scale)
    model.save_pretrained(str(out_dir))
    conf = json.loads((out_dir / "adapter_config.json").read_text())
    conf["base_model_name_or_path"] = base_dir.name  # the registry knows base models by name
    (out_dir / "adapter_config.json").write_text(json.dumps(conf))
    return out_dir
