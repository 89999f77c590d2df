"""A served model's own Hugging Face tokenizer, loaded on first use from the directory the
workers load the model from, for what a front end answers without a worker (the gateway's
/tokenize and /detokenize).

The workers encode with this tokenizer class (vLLM's is the model's AutoTokenizer, Triton's
catalog loads AutoTokenizer too) and render chats with shared/generation/engine_io.render_chat,
so ids from here are the ids a worker gives the same request. transformers is imported on the
first load, on a thread: it takes seconds and a front end that never tokenizes never pays it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from shared.prepare import engine_limit, model_context
from shared.runtime.config import Settings
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


class ModelTokenizers:
    """Per model: its tokenizer (None when its directory has none), loaded once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._loaded: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    def model_dir(self, model: str) -> Path:
        """Where the workers read `model`: SY_VLLM_MODEL_PATH for the vLLM pool's model, else
        <models_dir>/<model>."""
        s = self.settings
        return Path(s.model_path()) if model == s.vllm_model else s.model_dir / model

    def max_model_len(self, model: str) -> int:
        """The context the engine serves `model` with (its config.json capped by the engine's
        limit); 0 when neither says."""
        return model_context(self.model_dir(model), engine_limit(self.settings, model)) or 0

    async def get(self, model: str) -> Any | None:
        if model in self._loaded:
            return self._loaded[model]
        async with self._lock:
            if model not in self._loaded:
                self._loaded[model] = await asyncio.to_thread(self._load, self.model_dir(model))
        return self._loaded[model]

    @staticmethod
    def _load(path: Path) -> Any | None:
        if not any((path / f).is_file() for f in TOKENIZER_FILES):
            log.info("no tokenizer for model", path=str(path))
            return None
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path))
