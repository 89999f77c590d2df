"""Real peft LoRA adapters of the local base model, built in the test, and HF+PEFT references."""

from __future__ import annotations

import json
from pathlib import Path


def build_adapter(
    base_dir: Path,
    out_dir: Path,
    seed: int,
    rank: int = 8,
    target_modules: tuple[str, ...] = ("q_proj", "v_proj"),
    scale: float = 0.5,
) -> Path:
    """A peft adapter with non-zero, seed-dependent weights (saved as peft saves it)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    base = LlamaForCausalLM.from_pretrained(str(base_dir), torch_dtype=torch.float32)
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


def hf_greedy(
    base_dir: Path, adapter_dir: Path | None, prompt_ids: list[int], max_new_tokens: int
) -> list[int]:
    """Greedy token ids from transformers (+ peft), the reference vLLM's output must equal."""
    import torch
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(base_dir), torch_dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, str(adapter_dir))
    model.eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0
        )
    return out[0, len(prompt_ids) :].tolist()
