"""HF+PEFT references for LoRA adapters (the adapters themselves: shared.devstack.models.adapters)."""

from __future__ import annotations

from pathlib import Path


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
