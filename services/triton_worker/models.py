"""Which weights (and so which tokenizer and context length) a Triton model serves.

The worker renders chat templates and counts prompt tokens itself, as the vLLM worker does, so
both pools see the same prompt ids. The repository's text models name their weights in the
`weights` parameter of config.pbtxt; the tokenizer is read from `<models_dir>/<weights>`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.runtime.envelope import ErrorCode, Rejected

from .client import triton_unavailable
from .media import AudioSpec, VisionSpec


@dataclass(frozen=True)
class TextModel:
    name: str
    weights: Path
    tokenizer: Any
    max_len: int
    vision: VisionSpec | None = None  # a VLM (config.json has vision_config): takes images
    audio: AudioSpec | None = None  # an audio model (config.json has audio_config): takes audio

    def token_text(self, token_id: int) -> str:
        """A token's text alone, as vLLM names tokens in logprobs (the one id decoded)."""
        return self.tokenizer.decode([token_id]) or ""


class ModelCatalog:
    def __init__(self, client: Any, models_dir: Path) -> None:
        self.client = client
        self.models_dir = models_dir
        self._models: dict[str, TextModel] = {}
        self._lock = asyncio.Lock()

    async def get(self, name: str) -> TextModel:
        if name in self._models:
            return self._models[name]
        async with self._lock:
            if name not in self._models:
                try:
                    cfg = await self.client.get_model_config(name, as_json=True)
                except Exception as exc:  # Triton down: wait (issue 32); anything else as before
                    if (down := triton_unavailable(exc, f"config of {name!r}")) is not None:
                        raise down from exc
                    raise
                params = cfg.get("config", cfg).get("parameters", {})
                weights = params.get("weights", {}).get("string_value") or name
                model_dir = params.get("model_dir", {}).get("string_value") or ""
                path = Path(model_dir) if model_dir else self.models_dir / weights
                if not (path / "tokenizer_config.json").is_file():
                    raise Rejected(
                        ErrorCode.NO_POOL,
                        f"no tokenizer for Triton model {name!r} at {path} (SY_MODELS_DIR)",
                        http_status=503,
                    )
                same = next((m for m in self._models.values() if m.weights == path), None)
                if same is not None:  # e.g. sy-tiny-bf16 shares sy-tiny's tokenizer
                    self._models[name] = TextModel(
                        name, path, same.tokenizer, same.max_len, same.vision, same.audio
                    )
                else:
                    self._models[name] = await asyncio.to_thread(self._load, name, path)
        return self._models[name]

    @staticmethod
    def _load(name: str, path: Path) -> TextModel:
        from transformers import AutoTokenizer

        config = json.loads((path / "config.json").read_text())
        tok = AutoTokenizer.from_pretrained(str(path))
        vc = config.get("vision_config")
        vision = (
            VisionSpec(int(vc["image_size"]), int(vc["patch_size"]), int(config.get("image_token_index", 0)))
            if vc
            else None
        )
        ac = config.get("audio_config")
        audio = (
            AudioSpec(
                int(ac["hop_length"]) * int(ac["conv_stride"]) * int(ac["pool"]),
                int(config.get("audio_token_index", config.get("image_token_index", 0))),
                int(ac.get("sample_rate", 16000)),
            )
            if ac
            else None
        )
        text = config.get("text_config") or config
        max_len = int(config.get("max_position_embeddings") or text.get("max_position_embeddings", 2048))
        return TextModel(name, path, tok, max_len, vision, audio)
