"""A served model's tokenizer and chat template as a front end uses them without a worker (the
gateway's /tokenize and /detokenize), giving the ids a worker gives the same request.

The tokenizer is the `tokenizer.json` the gateway already loads to count prompt tokens
(shared/prepare.py TokenCounter): Hugging Face's fast tokenizers, which the workers' tokenizer
wraps. Chats are rendered by transformers' own `render_jinja_template` (what the workers'
`apply_chat_template` calls) with the template and special tokens of `tokenizer_config.json`.
That module needs no torch: loading it costs ~2 s and ~60 MB once, on a thread, where the full
AutoTokenizer would bring torch into the gateway (10 s, 450 MB).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from shared.prepare import TokenCounter, engine_limit, model_context, read_json
from shared.runtime.config import Settings

# The named special tokens a template sees as variables (transformers' SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class TemplateError(ValueError):
    """The model has no chat template, or its template refused the messages."""


@dataclass(frozen=True)
class ModelTokenizer:
    tokenizer: Tokenizer
    chat_template: str | None
    special_tokens: dict[str, str]
    clean_up_spaces: bool  # tokenizer_config's clean_up_tokenization_spaces

    @property
    def vocab_size(self) -> int:
        """Ids a client may name: the vocabulary with its added tokens (len() of the HF tokenizer)."""
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def token_strs(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.id_to_token(i) or "" for i in ids]

    def decode(self, ids: list[int]) -> str:
        """Special tokens kept, as vLLM's /detokenize decodes; transformers' space clean-up where the
        config asks for it (transformers skips it for BPE models)."""
        text = str(self.tokenizer.decode(ids, skip_special_tokens=False))
        if self.clean_up_spaces and type(self.tokenizer.model).__name__ != "BPE":
            from transformers.tokenization_utils_base import PreTrainedTokenizerBase

            text = PreTrainedTokenizerBase.clean_up_tokenization(None, text)  # type: ignore[arg-type]
        return text

    def render_chat(
        self, messages: list[dict[str, str]], add_generation_prompt: bool, continue_final_message: bool
    ) -> str:
        if self.chat_template is None:
            raise TemplateError("the model has no chat template")
        from jinja2 import TemplateError as JinjaError
        from transformers.utils.chat_template_utils import render_jinja_template

        try:
            rendered, _ = render_jinja_template(
                [messages],
                chat_template=self.chat_template,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                **self.special_tokens,
            )
        except (JinjaError, ValueError, TypeError) as exc:
            raise TemplateError(f"the model's chat template refused the messages: {exc}") from None
        return str(rendered[0])


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken object."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def chat_template(model_dir: Path, config: dict[str, Any]) -> str | None:
    """The template transformers would use: chat_template.jinja beside the config, else the
    config's `chat_template` (a string, or named templates of which `default`)."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    tpl = config.get("chat_template")
    if isinstance(tpl, list):
        tpl = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
    if isinstance(tpl, dict):
        tpl = tpl.get("default")
    return tpl if isinstance(tpl, str) else None


class ModelTokenizers:
    """Per model (its directory under SY_MODELS_DIR): its ModelTokenizer, None when it has no
    tokenizer.json there."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.counter = TokenCounter(settings.model_dir)
        self._loaded: dict[str, ModelTokenizer | None] = {}
        self._lock = asyncio.Lock()

    def model_dir(self, model: str) -> Path:
        return self.settings.model_dir / model

    def max_model_len(self, model: str) -> int:
        """The context the engine serves `model` with (its config.json, capped by the engine's
        limit), as preprocess checks it; 0 when neither says."""
        return model_context(self.model_dir(model), engine_limit(self.settings, model)) or 0

    async def get(self, model: str) -> ModelTokenizer | None:
        if model not in self._loaded:
            async with self._lock:
                if model not in self._loaded:
                    self._loaded[model] = await asyncio.to_thread(self._load, model)
        return self._loaded[model]

    def _load(self, model: str) -> ModelTokenizer | None:
        tok = self.counter.tokenizer(model)
        if tok is None:
            return None
        d = self.model_dir(model)
        config = read_json(d / "tokenizer_config.json")
        legacy = read_json(d / "special_tokens_map.json")
        special = {
            name: text
            for name in SPECIAL_TOKENS
            if (text := _token_text(config.get(name, legacy.get(name)))) is not None
        }
        template = chat_template(d, config)
        if template is not None:
            # The first chat pays transformers' import here, on this thread, not on the event loop.
            from transformers.utils.chat_template_utils import render_jinja_template  # noqa: F401
        return ModelTokenizer(tok, template, special, bool(config.get("clean_up_tokenization_spaces")))
