"""vLLM's POST /tokenize and POST /detokenize on the gateway (issue 36), on the real FastAPI app with a model directory as the workers read it (Hugging Face tokenizer
files and a chat template): a prompt and chat messages tokenize to the ids a worker gives the same
request, detokenize gives the text back, and every bad body is a 4xx naming its field, never a 5xx."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.replies import ReplyRouter
from services.gateway.requests.sqlite_store import SqliteResultStore
from shared.devstack.models.tokenizer import SPECIAL_TOKENS, save_tokenizer
from shared.generation.engine_io import prompt_token_ids
from shared.openai.format import to_envelope
from shared.openai.protocol import ChatCompletionRequest, CompletionRequest
from shared.runtime.config import Settings

AUTH = {"Authorization": "Bearer sk-a"}
OTHER = {"Authorization": "Bearer sk-b"}
CONTEXT = 128
WORDS = ["[UNK]", "hi", "there", "word", "lantern"]
MESSAGES = [{"role": "system", "content": "hi"}, {"role": "user", "content": "there word"}]


def model_files(d: Path) -> None:
    """sy-tiny's tokenizer files in the layout the workers load (tokenizer.json,
    tokenizer_config.json with its chat template), over a small word-level vocabulary; encoding
    with special tokens puts BOS first, so where they are added (and not) shows."""
    d.mkdir(parents=True)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    bos = tok.token_to_id(SPECIAL_TOKENS[1])
    tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", bos)])
    save_tokenizer(tok, d, 4096)
    (d / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("models")
    model_files(d / "sy-tiny")
    return d


class Registry:
    """acme's private adapter `acme-lora` on sy-tiny; `down` makes every call fail."""

    def __init__(self) -> None:
        self.down = False

    async def resolve(self, tenant: str, ref: str) -> dict[str, Any] | None:
        if self.down:
            raise ConnectionError("registry unreachable")
        if ref.partition("@")[0] != "acme-lora" or tenant != "acme":
            return None
        return {
            "name": "acme-lora",
            "version": 1,
            "sha256": "ab" * 32,
            "owner": "acme",
            "base_model": "sy-tiny",
        }


def gateway(tmp_path: Path, models_dir: Path, registry: Registry | None = None) -> httpx.AsyncClient:
    settings = Settings(
        var_dir=tmp_path,
        models_dir=models_dir,
        api_keys={"sk-a": "acme", "sk-b": "beta"},
        vllm_max_model_len=CONTEXT,
    )

    async def submit(env: Any, topic: str | None = None) -> None:
        raise AssertionError("tokenizing produces nothing")

    registry = registry or Registry()
    backend = Backend(
        settings=settings,
        submit=submit,
        replies=ReplyRouter(),
        store=SqliteResultStore(tmp_path / "results.sqlite"),
        ready=lambda: True,
        resolve_adapter=registry.resolve,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(create_app(backend)), base_url="http://gw")


def hf_tokenizer(models_dir: Path, model: str = "sy-tiny") -> Any:
    """The tokenizer the workers load (vLLM's and Triton's: AutoTokenizer)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(models_dir / model))


async def test_a_prompt_round_trips_with_the_ids_a_worker_sees(tmp_path: Path, models_dir: Path) -> None:
    tok = hf_tokenizer(models_dir)
    worker_ids = prompt_token_ids(
        tok, to_envelope(CompletionRequest(model="sy-tiny", prompt="hi there lantern"), **_ids())
    )
    async with gateway(tmp_path, models_dir) as http:
        r = await http.post(
            "/tokenize", json={"model": "sy-tiny", "prompt": "hi there lantern"}, headers=AUTH
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"count": 4, "max_model_len": CONTEXT, "tokens": worker_ids, "token_strs": None}
        bos = tok.bos_token_id
        assert worker_ids == [bos, 1, 2, 4]  # a prompt is encoded with special tokens, as vLLM does
        r = await http.post("/detokenize", json={"model": "sy-tiny", "tokens": worker_ids[1:]}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.json() == {"prompt": "hi there lantern"}
        r = await http.post("/detokenize", json={"model": "sy-tiny", "tokens": worker_ids}, headers=AUTH)
        assert r.json() == {"prompt": "<|bos|> hi there lantern"}  # specials kept, as vLLM decodes
        # No model: the vLLM pool's, as vLLM's server takes its one model.
        r = await http.post(
            "/tokenize",
            json={"prompt": "word", "return_token_strs": True, "add_special_tokens": False},
            headers=AUTH,
        )
        assert r.json()["tokens"] == [3] and r.json()["token_strs"] == ["word"], r.text


async def test_chat_messages_tokenize_as_the_worker_renders_them(tmp_path: Path, models_dir: Path) -> None:
    tok = hf_tokenizer(models_dir)
    worker_ids = prompt_token_ids(
        tok, to_envelope(ChatCompletionRequest(model="sy-tiny", messages=MESSAGES), **_ids())
    )
    assistant = tok.convert_tokens_to_ids("<|assistant|>")
    async with gateway(tmp_path, models_dir) as http:
        r = await http.post(
            "/tokenize",
            json={"model": "sy-tiny", "messages": MESSAGES, "return_token_strs": True},
            headers=AUTH,
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tokens"] == worker_ids and body["count"] == len(worker_ids)
        assert body["tokens"][-1] == assistant and body["token_strs"][0] == "<|bos|>"
        assert body["tokens"].count(tok.bos_token_id) == 1  # the template places BOS; nothing more
        r = await http.post(
            "/tokenize",
            json={"model": "sy-tiny", "messages": MESSAGES, "add_special_tokens": True},
            headers=AUTH,
        )
        assert r.json()["tokens"] == [tok.bos_token_id, *worker_ids], r.text
        r = await http.post(
            "/tokenize",
            json={"model": "sy-tiny", "messages": MESSAGES, "add_generation_prompt": False},
            headers=AUTH,
        )
        assert r.json()["tokens"] == worker_ids[:-1], r.text
        parts = [{"role": "user", "content": [{"type": "text", "text": "there word"}]}]
        r = await http.post("/tokenize", json={"model": "sy-tiny", "messages": parts}, headers=AUTH)
        assert r.status_code == 200 and r.json()["tokens"][-4:-1] == [
            2,
            3,
            tok.convert_tokens_to_ids("<|end|>"),
        ]
        # continue_final_message: the last (assistant) turn stays open, as transformers renders it.
        prefill = [*MESSAGES, {"role": "assistant", "content": "lantern"}]
        text = tok.apply_chat_template(prefill, continue_final_message=True, tokenize=False)
        r = await http.post(
            "/tokenize",
            json={"model": "sy-tiny", "messages": prefill, "continue_final_message": True},
            headers=AUTH,
        )
        assert r.json()["tokens"] == tok.encode(text, add_special_tokens=False), r.text
        assert r.json()["tokens"][-1] == 4 and tok.eos_token_id not in r.json()["tokens"]
        # An adapter tokenizes with its base model's tokenizer.
        r = await http.post("/tokenize", json={"model": "acme-lora", "messages": MESSAGES}, headers=AUTH)
        assert r.status_code == 200 and r.json()["tokens"] == worker_ids, r.text


@pytest.mark.parametrize(
    ("path", "body", "param", "reason"),
    [
        ("/tokenize", {"model": "sy-tiny", "prompt": ""}, "prompt", "at least 1 character"),
        ("/tokenize", {"model": "sy-tiny"}, None, "send either prompt or messages"),
        ("/tokenize", {"model": "sy-tiny", "prompt": "hi", "messages": MESSAGES}, None, "either prompt or"),
        ("/tokenize", {"model": "sy-tiny", "messages": []}, "messages", "at least 1 item"),
        ("/tokenize", {"model": "sy-tiny", "prompt": 5}, "prompt", "valid string"),
        (
            "/tokenize",
            {"model": "sy-tiny", "prompt": "hi", "add_special_tokens": "yes"},
            "add_special_tokens",
            "valid boolean",
        ),
        (
            "/tokenize",
            {"model": "sy-tiny", "prompt": "hi", "add_generation_prompt": True},
            None,
            "messages only",
        ),
        (
            "/tokenize",
            {"model": "sy-tiny", "prompt": "hi", "chat_template": "{{x}}"},
            "chat_template",
            "Extra inputs",
        ),
        (
            "/tokenize",
            {
                "model": "sy-tiny",
                "messages": MESSAGES,
                "continue_final_message": True,
                "add_generation_prompt": True,
            },
            None,
            "cannot set both",
        ),
        (
            "/tokenize",
            {
                "model": "sy-tiny",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            },
            "messages.0.content.0",
            "counts text only",
        ),
        (
            "/tokenize",
            {"model": "sy-tiny", "messages": [{"role": "tool", "content": "x"}]},
            "messages",
            "chat template refused",
        ),
        ("/detokenize", {"model": "sy-tiny", "tokens": ["a"]}, "tokens.0", "valid integer"),
        ("/detokenize", {"model": "sy-tiny", "tokens": [1.5]}, "tokens.0", "valid integer"),
        ("/detokenize", {"model": "sy-tiny", "tokens": [-1]}, "tokens.0", "greater than or equal to 0"),
        ("/detokenize", {"model": "sy-tiny", "tokens": [2**64]}, "tokens.0", "less than"),
        (
            "/detokenize",
            {"model": "sy-tiny", "tokens": [1, 100000]},
            "tokens",
            "outside the model's vocabulary",
        ),
        ("/detokenize", {"model": "sy-tiny", "tokens": [2**62]}, "tokens", "outside the model's vocabulary"),
        ("/detokenize", {"model": "sy-tiny", "tokens": "1 2"}, "tokens", "valid list"),
        ("/detokenize", {"model": "sy-tiny"}, "tokens", "Field required"),
    ],
)
async def test_bad_bodies_are_a_400_naming_the_field(
    tmp_path: Path, models_dir: Path, path: str, body: dict[str, Any], param: str | None, reason: str
) -> None:
    async with gateway(tmp_path, models_dir) as http:
        r = await http.post(path, json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and reason in err["message"], err
    assert err["type"] == "invalid_request_error"


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize"])
async def test_unknown_models_are_404_and_callers_without_a_key_401(
    tmp_path: Path, models_dir: Path, path: str
) -> None:
    body: dict[str, Any] = {"prompt": "hi"} if path == "/tokenize" else {"tokens": [1]}
    async with gateway(tmp_path, models_dir) as http:
        for model, headers in (("nope", AUTH), ("acme-lora", OTHER), ("bad/../name", AUTH)):
            r = await http.post(path, json={**body, "model": model}, headers=headers)
            assert r.status_code == 404, r.text
            assert r.json()["error"] == {
                "message": f"The model '{model}' does not exist",
                "type": "not_found_error",
                "param": "model",
                "code": "model_not_found",
            }
        # Served (by the Triton pool) but no tokenizer under SY_MODELS_DIR: said so, not a 500.
        r = await http.post(path, json={**body, "model": "sy-tiny-bf16"}, headers=AUTH)
        assert r.status_code == 404 and "no tokenizer" in r.json()["error"]["message"], r.text
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
            r = await http.post(path, json={**body, "model": "sy-tiny"}, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", r.text


def _ids() -> dict[str, Any]:
    return {"request_id": "r1", "tenant": "acme", "deadline_unix_ms": 0}


def test_the_template_and_decoding_follow_what_transformers_reads(tmp_path: Path, models_dir: Path) -> None:
    """chat_template.jinja beside the config wins, named templates give `default`, AddedToken
    objects name special tokens, and clean_up_tokenization_spaces applies (not for BPE models)."""
    from shared.model_tokenizer import ModelTokenizers, chat_template

    assert chat_template(tmp_path, {"chat_template": [{"name": "default", "template": "D"}]}) == "D"
    assert chat_template(tmp_path, {"chat_template": [{"name": "tool_use", "template": "T"}]}) is None
    (tmp_path / "chat_template.jinja").write_text("J")
    assert chat_template(tmp_path, {"chat_template": "C"}) == "J"

    d = tmp_path / "models" / "wp"
    model_files(d)
    config = json.loads((d / "tokenizer_config.json").read_text())
    config.update(clean_up_tokenization_spaces=True, bos_token={"content": "<|bos|>", "special": True})
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.add_tokens(["."])
    tok.save(str(d / "tokenizer.json"))
    loaded = asyncio.run(ModelTokenizers(Settings(models_dir=tmp_path / "models")).get("wp"))
    assert loaded is not None and loaded.special_tokens["bos_token"] == "<|bos|>"
    ids = loaded.encode("hi .", add_special_tokens=False)
    # Word-level, not BPE: transformers (the workers' tokenizer) cleans " ." up, and so does this.
    assert loaded.decode(ids) == hf_tokenizer(tmp_path / "models", "wp").decode(ids) == "hi."
