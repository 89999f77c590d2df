"""Text preparation: defaults, prompt token counts and the context check a request needs before a
worker sees it — preprocess's work on the text of every request.

preprocess runs it on every record of sy.requests (after its media checks). The gateway runs the
same code itself on the text-only chat/completion requests it accepts over REST and sends them on
to the stage after preprocess (`next_topic`): for such a request preprocess would do ~0.2 ms of
work behind a Kafka hop of 3–16 ms on the embedded broker (docs/workers.md, pipeline-vs-engine), the way
vLLM's own API server tokenizes in its front end rather than in another process.
"""

from __future__ import annotations

import asyncio
import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from shared.cache_rules import cache_may_answer, has_media
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, ErrorCode, Kind, Priority, Rejected
from shared.runtime.telemetry import add_timing, get_logger

log = get_logger(__name__)

INLINE_CHARS = 2048  # longer prompts are tokenized off the event loop (2,048 chars: ~1 ms here)


class TokenCounter:
    """Loads `<models_dir>/<model>/tokenizer.json` on first use; None when the model has none."""

    def __init__(self, models_dir: Path) -> None:
        self._dir = models_dir
        self._cache: dict[str, Tokenizer | None] = {}

    def tokenizer(self, model: str) -> Tokenizer | None:
        if model not in self._cache:
            path = self._dir / model / "tokenizer.json"
            self._cache[model] = Tokenizer.from_file(str(path)) if path.is_file() else None
            if self._cache[model] is None:
                log.info("no tokenizer for model; prompt tokens not counted", model=model, path=str(path))
        return self._cache[model]

    def count(self, model: str, texts: list[str]) -> int | None:
        tok = self.tokenizer(model)
        if tok is None:
            return None
        return sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))


def prompt_texts(env: Envelope) -> list[str]:
    req = env.request
    if req.prompt:
        return [req.prompt]
    texts = []
    for m in req.messages:
        texts.append(m.content)
        texts.extend(p.text for p in m.parts if p.type == "text")
    return texts


class Preprocessor:
    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

    def prepare(self, env: Envelope, media_checked: bool = False) -> Envelope:
        """Fill defaults and token counts in place; raise Rejected for what cannot be served."""
        for i, m in enumerate(env.request.messages):
            for j, p in enumerate(m.parts):
                if p.type != "text" and not media_checked:
                    raise Rejected(
                        "unsupported_media",
                        f"request.messages[{i}].parts[{j}] is {p.type}; media input is not enabled on this deployment",
                    )
        if env.priority == Priority.PRIORITY_UNSPECIFIED:
            env.priority = Priority.PRIORITY_INTERACTIVE
        if env.created_unix_ns == 0:
            env.created_unix_ns = time.time_ns()
        if env.deadline_unix_ms and env.deadline_unix_ms < time.time() * 1000:
            raise Rejected(
                ErrorCode.DEADLINE_EXCEEDED, "deadline passed before preprocessing", http_status=504
            )
        n = self.counter.count(env.model, prompt_texts(env))
        if n is not None:
            env.tokens.prompt_text = n
            env.tokens.total = n + env.tokens.image + env.tokens.audio
            env.tokens.tokenizer = env.model
        return env


def read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def context_tokens(config: dict[str, Any], engine_limit: int | None) -> int | None:
    """The context length a model's config.json states (a VLM's in its text_config), capped by
    what the engine allows (`engine_limit`)."""
    text = config.get("text_config") or config
    n = text.get("max_position_embeddings") or config.get("max_position_embeddings")
    ctx = int(n) if n else None
    if engine_limit is not None:
        ctx = min(ctx, engine_limit) if ctx else engine_limit
    return ctx


@lru_cache(maxsize=64)
def model_context(model_dir: Path, engine_limit: int | None) -> int | None:
    """`context_tokens` of the model's config.json, read once."""
    return context_tokens(read_json(model_dir / "config.json"), engine_limit)


def engine_limit(settings: Settings, model: str) -> int | None:
    """SY_VLLM_MAX_MODEL_LEN for the model the vLLM pool serves; None for others."""
    return settings.vllm_max_model_len if model == settings.vllm_model else None


def check_context(total: int, ctx: int | None, detail: str) -> None:
    """Refuse a prompt that cannot fit the model's context before it reaches a worker."""
    if ctx is not None and total >= ctx:
        raise Rejected(
            "context_length_exceeded",
            f"prompt is {total} tokens ({detail}); the model's context is {ctx}",
            400,
        )


def next_topic(env: Envelope, settings: Settings) -> str:
    """The stage after preprocess: the cache, or the router where the cache could never answer
    (a hop saved; the same rule as the cache's)."""
    return settings.topic("prepared") if cache_may_answer(env, settings) else settings.topic("routing")


class TextPreparer:
    """preprocess's work on a text-only chat/completion request, for the gateway to do in-process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pre = Preprocessor(TokenCounter(settings.model_dir))

    def warm(self, model: str) -> None:
        """Load the model's tokenizer now rather than on its first request."""
        self.pre.counter.tokenizer(model)

    def can_prepare(self, env: Envelope) -> bool:
        """Text only, and the model's tokenizer is here (else preprocess counts, or says why not)."""
        return (
            env.kind in (Kind.KIND_CHAT, Kind.KIND_COMPLETION)
            and not has_media(env)
            and self.pre.counter.tokenizer(env.model) is not None
        )

    async def prepare(self, env: Envelope, parent: str) -> str | None:
        """Prepare `env` in place and return the topic it goes to next; None: not ours to prepare
        (it goes to sy.requests). Rejected for what cannot be served, as preprocess would.

        A long prompt is tokenized on a thread (the tokenizer releases the GIL): the gateway's
        event loop serves every open stream of this replica."""
        if not self.can_prepare(env):
            return None
        if sum(len(t) for t in prompt_texts(env)) > INLINE_CHARS:
            return await asyncio.to_thread(self._prepare, env, parent)
        return self._prepare(env, parent)

    def _prepare(self, env: Envelope, parent: str) -> str:
        start = time.time_ns()
        self.pre.prepare(env)
        n = env.tokens.prompt_text
        check_context(
            n,
            model_context(self.settings.model_dir / env.model, engine_limit(self.settings, env.model)),
            f"{n} text",
        )
        add_timing(env, "prepare", start, time.time_ns(), parent=parent)
        return next_topic(env, self.settings)
