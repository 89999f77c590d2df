"""The gateway prepares text requests itself (shared/prepare.py: TextPreparer), on the real FastAPI
app: a text chat request is counted, timed and sent to the stage after preprocess (the router with
the cache off, the cache for a deterministic request with it on); a prompt over the context is a
400 before anything is produced; media, a model without a tokenizer here and the switch off go
through sy.requests to preprocess as before. The whole path: tests/e2e/test_openai_api.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from switchyard.v1.envelope_pb2 import Choice, Response, Usage
from tokenizers import Tokenizer, models, pre_tokenizers

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.replies import ReplyRouter
from services.gateway.requests.sqlite_store import SqliteResultStore
from shared.prepare import INLINE_CHARS, TextPreparer
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope

AUTH = {"Authorization": "Bearer sk-a"}
CONTEXT = 32


def model_files(models_dir: Path) -> None:
    """sy-tiny as far as preparing needs it: a word-level tokenizer and a context of CONTEXT."""
    d = models_dir / "sy-tiny"
    d.mkdir(parents=True)
    words = ["[UNK]", "hi", "there", "word"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    (d / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))


class Pipeline:
    """Records where each request was produced and answers it at once."""

    def __init__(self) -> None:
        self.replies = ReplyRouter()
        self.sent: list[tuple[str | None, Envelope]] = []

    async def submit(self, env: Envelope, topic: str | None = None) -> None:
        self.sent.append((topic, Envelope.FromString(env.SerializeToString())))
        out = Envelope.FromString(env.SerializeToString())
        out.response.CopyFrom(
            Response(
                choices=[Choice(text="ok", finish_reason="stop")],
                usage=Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2),
            )
        )
        asyncio.get_running_loop().call_soon(self.replies.on_response, out, 0)


def gateway(tmp_path: Path, pipeline: Pipeline, **overrides: object) -> httpx.AsyncClient:
    model_files(tmp_path / "models")
    settings = Settings(
        var_dir=tmp_path,
        models_dir=tmp_path / "models",
        api_keys={"sk-a": "acme"},
        gateway_timeout_s=3,
        **{"vllm_max_model_len": CONTEXT, **overrides},
    )
    backend = Backend(
        settings=settings,
        submit=pipeline.submit,
        replies=pipeline.replies,
        store=SqliteResultStore(tmp_path / "results.sqlite"),
        ready=lambda: True,
        prepare=TextPreparer(settings).prepare if settings.gateway_prepare_text else None,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(create_app(backend)), base_url="http://gw")


def chat(content: object, **extra: object) -> dict[str, object]:
    return {"model": "sy-tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 4, **extra}


@pytest.mark.parametrize(
    ("cache", "temperature", "topic", "words"),
    [
        (False, 0, "sy.routing", 3),
        (True, 0, "sy.prepared", 3),
        (True, 1, "sy.routing", 3),
        (False, 0, "sy.routing", 1000),  # over INLINE_CHARS: tokenized on a thread, same result
    ],
)
async def test_a_text_request_goes_past_preprocess_counted(
    tmp_path: Path, cache: bool, temperature: float, topic: str, words: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    threaded: list[object] = []
    real = asyncio.to_thread

    async def to_thread(fn: Any, *args: Any) -> Any:
        threaded.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr("shared.prepare.asyncio.to_thread", to_thread)
    p = Pipeline()
    text = " ".join(["hi", "there", "word"] * (words // 3) + ["word"] * (words % 3))
    async with gateway(tmp_path, p, cache_enabled=cache, vllm_max_model_len=4096) as http:
        r = await http.post("/v1/chat/completions", json=chat(text, temperature=temperature), headers=AUTH)
    assert r.status_code == 200, r.text
    [(sent_to, env)] = p.sent
    assert sent_to == topic
    assert env.tokens.prompt_text == words and env.tokens.tokenizer == "sy-tiny"
    assert len(threaded) == (len(text) > INLINE_CHARS) and (words < 1000 or threaded)
    [row] = [t for t in env.timings if t.stage == "prepare"]
    assert row.attrs["parent"] == "gateway_accept" and row.end_ns >= row.start_ns
    rows = r.json()["switchyard"]["breakdown"]
    assert any(x["stage"] == "prepare" and x["parent"] == "gateway_accept" for x in rows)


async def test_a_prompt_over_the_context_is_refused_before_anything_is_produced(tmp_path: Path) -> None:
    p = Pipeline()
    async with gateway(tmp_path, p) as http:
        r = await http.post("/v1/chat/completions", json=chat(" ".join(["word"] * CONTEXT)), headers=AUTH)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and f"context is {CONTEXT}" in err["message"]
    assert p.sent == []


async def test_media_goes_to_preprocess(tmp_path: Path) -> None:
    p = Pipeline()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    async with gateway(tmp_path, p) as http:
        r = await http.post(
            "/v1/chat/completions", json=chat([{"type": "text", "text": "hi"}, image]), headers=AUTH
        )
    assert r.status_code == 200, r.text
    [(sent_to, env)] = p.sent
    assert sent_to is None and not env.tokens.tokenizer  # sy.requests: preprocess checks and counts


async def test_no_tokenizer_here_or_switched_off_goes_to_preprocess(tmp_path: Path) -> None:
    p = Pipeline()
    async with gateway(tmp_path / "off", p, gateway_prepare_text=False) as http:
        assert (await http.post("/v1/chat/completions", json=chat("hi"), headers=AUTH)).status_code == 200
    async with gateway(tmp_path / "none", p) as http:
        (tmp_path / "none" / "models" / "sy-tiny" / "tokenizer.json").unlink()
        assert (await http.post("/v1/chat/completions", json=chat("hi"), headers=AUTH)).status_code == 200
    assert [topic for topic, _ in p.sent] == [None, None]
