"""Tokenize and detokenize with the served model's own tokenizer, as vLLM's server does, without
a worker: tools that count tokens (benchmarks, context budgeting) get the ids the engine sees."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from shared.model_tokenizer import ModelTokenizer, ModelTokenizers, TemplateError
from shared.prepare import INLINE_CHARS

from ..backend import Backend
from ..errors import ApiError
from ..models.serving import ModelCatalog
from .protocol import DetokenizeRequest, TokenizeRequest

T = TypeVar("T")


def _invalid(message: str, param: str) -> ApiError:
    return ApiError(400, message, "invalid_request", param)


def chat_texts(body: TokenizeRequest) -> list[dict[str, str]]:
    """The messages as the workers render them (engine_io.chat_messages: text only); a media
    part is refused, since its tokens are the model family's and not the tokenizer's."""
    out = []
    for i, m in enumerate(body.messages or []):
        if isinstance(m.content, list):
            for j, p in enumerate(m.content):
                if p.type != "text":
                    raise _invalid(
                        f"messages[{i}].content[{j}] is {p.type}: /tokenize counts text only",
                        f"messages.{i}.content.{j}",
                    )
            text = "".join(p.text for p in m.content if p.type == "text")
        else:
            text = m.content or ""
        out.append({"role": m.role, "content": text})
    return out


class TokenizeServing:
    def __init__(self, backend: Backend, models: ModelCatalog, tokenizers: ModelTokenizers) -> None:
        self.backend, self.models, self.tokenizers = backend, models, tokenizers

    async def _tokenizer(self, tenant: str, model: str | None) -> tuple[str, ModelTokenizer]:
        """(base model, its tokenizer) for the model named (an adapter: its base model's)."""
        if model is None:
            s = self.backend.settings
            if s.vllm_model not in self.backend.models:
                raise _invalid("model is required", "model")
            model = s.vllm_model
        base = await self.models.base_of(tenant, model)
        tok = await self.tokenizers.get(base)
        if tok is None:
            where = self.tokenizers.model_dir(base)
            raise ApiError(
                404, f"no tokenizer for model '{model}' on the gateway ({where})", "model_not_found", "model"
            )
        return base, tok

    async def tokenize(self, body: TokenizeRequest, tenant: str) -> dict[str, Any]:
        base, tok = await self._tokenizer(tenant, body.model)
        chat = chat_texts(body) if body.messages is not None else None
        size = len(body.prompt or "") + sum(len(m["content"]) for m in chat or [])

        def encode() -> list[int]:
            if chat is None:
                return tok.encode(body.prompt or "", body.specials())
            try:
                text = tok.render_chat(chat, body.add_generation_prompt, body.continue_final_message)
            except TemplateError as exc:
                raise _invalid(str(exc), "messages") from None
            return tok.encode(text, body.specials())

        ids = await _run(encode, size)
        return {
            "count": len(ids),
            "max_model_len": self.tokenizers.max_model_len(base),
            "tokens": ids,
            "token_strs": tok.token_strs(ids) if body.return_token_strs else None,
        }

    async def detokenize(self, body: DetokenizeRequest, tenant: str) -> dict[str, Any]:
        _, tok = await self._tokenizer(tenant, body.model)
        vocab = tok.vocab_size
        bad = sorted({t for t in body.tokens if t >= vocab})
        if bad:
            raise _invalid(
                f"token id(s) {bad[:10]} are outside the model's vocabulary of {vocab} tokens", "tokens"
            )
        return {"prompt": await _run(lambda: tok.decode(body.tokens), len(body.tokens))}


async def _run(fn: Callable[[], T], size: int) -> T:
    """Small inputs inline; long ones on a thread (the tokenizer releases the GIL) so the event
    loop keeps serving every open stream of this replica (as shared/prepare.py does)."""
    if size > INLINE_CHARS:
        return await asyncio.to_thread(fn)
    return fn()
