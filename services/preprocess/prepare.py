"""Text preprocessing: normalise the envelope and count prompt tokens with the model's tokenizer.

Media parts are handled by `media_stage.MediaStage` first; `prepare` refuses any it is not told
were checked, so a request never fails late inside a worker that cannot read it.
"""

from __future__ import annotations

import time
from pathlib import Path

from tokenizers import Tokenizer

from shared.envelope import Envelope, ErrorCode, Priority, Rejected
from shared.telemetry import get_logger

log = get_logger(__name__)


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
        self._counter = counter

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
        n = self._counter.count(env.model, prompt_texts(env))
        if n is not None:
            env.tokens.prompt_text = n
            env.tokens.total = n + env.tokens.image + env.tokens.audio
            env.tokens.tokenizer = env.model
        return env
