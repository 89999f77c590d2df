"""Real peft LoRA adapters of the local base model, built in the test, and HF+PEFT references."""

from __future__ import annotations

from pathlib import Path

from shared.devstack.models.adapters import build_adapter  # noqa: F401 - moved to devstack


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
