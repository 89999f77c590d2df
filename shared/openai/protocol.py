"""Request and response bodies of the OpenAI-compatible API (pydantic: the boundary is validated here).

Unknown fields are refused with a 400 naming them, so a client never believes a parameter
took effect when it did not. vLLM's extra sampling fields that the vLLM worker honours (top_k,
min_p, min_tokens, repetition_penalty, ignore_eos, stop_token_ids, logit_bias, ...) are accepted
as vLLM's OpenAI server accepts them; the rest (use_beam_search, prompt_logprobs, ...) stay
unknown fields. The flags are strict booleans: `"ignore_eos": "false"` is a 400, not a true.

The response models describe what the gateway sends (shared/openai/format.py builds the bodies);
they give /openapi.json its response schemas, as vLLM's protocol.py does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from shared.batches.store import BatchObject as BatchObject
from shared.batches.store import FileObject as FileObject
from shared.runtime.envelope import MAX_MAX_TOKENS

MAX_STOP = 4
MAX_TOKEN_IDS = 4096  # entries of stop_token_ids, allowed_token_ids and logit_bias
MAX_BAD_WORDS = 256

# A token id as vLLM takes it; whether it is in the model's vocabulary is the worker's check.
TokenId = Annotated[StrictInt, Field(ge=0, lt=2**31)]
# logit_bias keys are JSON object keys, so strings of digits ("50256"), as OpenAI's.
TokenIdKey = Annotated[int, Field(ge=0, lt=2**31)]
Bias = Annotated[float, Field(ge=-100, le=100)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ImagePart(_Strict):
    type: Literal["image_url"]
    image_url: dict[str, Any]


class AudioPart(_Strict):
    type: Literal["input_audio"]
    input_audio: dict[str, Any]


Part = Annotated[TextPart | ImagePart | AudioPart, Field(discriminator="type")]


class ChatMessageIn(_Strict):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[Part] | None = None
    name: str | None = None


class StreamOptions(_Strict):
    include_usage: bool = False


class _Sampling(_Strict):
    model: str = Field(min_length=1, max_length=256)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int | None = Field(default=None, ge=1, le=16)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    user: str | None = Field(default=None, max_length=256)
    # vLLM extensions
    top_k: int | None = Field(default=None, ge=-1, lt=2**31)
    min_tokens: int | None = Field(default=None, ge=0, le=MAX_MAX_TOKENS)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    min_p: float | None = Field(default=None, ge=0, le=1, strict=True)
    ignore_eos: StrictBool | None = None
    stop_token_ids: list[TokenId] | None = Field(default=None, max_length=MAX_TOKEN_IDS)
    include_stop_str_in_output: StrictBool | None = None
    skip_special_tokens: StrictBool | None = None
    spaces_between_special_tokens: StrictBool | None = None
    logit_bias: dict[TokenIdKey, Bias] | None = Field(
        default=None, max_length=MAX_TOKEN_IDS, description="token id -> bias in [-100, 100]"
    )
    allowed_token_ids: list[TokenId] | None = Field(default=None, min_length=1, max_length=MAX_TOKEN_IDS)
    bad_words: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, max_length=MAX_BAD_WORDS
    )
    # Switchyard extensions
    adapter: str | None = Field(default=None, max_length=200, description="LoRA adapter name[@version|alias]")

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> list[str] | None:
        if v is None:
            return None
        stops = [v] if isinstance(v, str) else v
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences")
        return stops

    def token_limit(self) -> int | None:
        return None

    @model_validator(mode="after")
    def _min_within_max(self) -> _Sampling:
        """vLLM refuses min_tokens over max_tokens; refused here, with the field named."""
        limit = self.token_limit()
        if self.min_tokens is not None and limit is not None and self.min_tokens > limit:
            raise ValueError(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({limit})")
        return self


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessageIn] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_MAX_TOKENS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_MAX_TOKENS)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1, le=MAX_MAX_TOKENS)  # OpenAI's completions default
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: Literal[False] = False

    def token_limit(self) -> int | None:
        return self.max_tokens

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: str | list[str]) -> str:
        if isinstance(v, list):
            if len(v) != 1:
                raise ValueError("exactly one prompt per request (send a batch through /v1/batches)")
            v = v[0]
        if not v:
            raise ValueError("prompt must not be empty")
        return v


class AsyncRequest(_Strict):
    """Body of POST /v1/requests: an OpenAI request to run in the background."""

    endpoint: Literal["/v1/chat/completions", "/v1/completions"] = "/v1/chat/completions"
    body: dict[str, Any]
    request_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._:-]{1,100}$",
        description="Idempotency key: a retry returns the same request",
    )


class CreateBatch(_Strict):
    """Body of POST /v1/batches."""

    input_file_id: str = Field(min_length=1, max_length=128)
    endpoint: str
    completion_window: str = "24h"
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


# ----------------------------------------------------------------------------------- responses
class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    """Every error the REST services answer, as OpenAI's clients expect it (shared/openai/errors.py)."""

    error: ErrorInfo


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CacheInfo(BaseModel):
    hit: bool
    tier: str
    similarity: float
    entry_id: str


class SwitchyardInfo(BaseModel):
    """Switchyard's extension on every reply: who answered and the per-stage breakdown."""

    request_id: str
    adapter: str | None = Field(description="name@version of the adapter that answered; None: the base model")
    pool: str
    worker: str
    breakdown: list[dict[str, Any]] = Field(description="hops (queue) and stages in order, in ms")
    stages_total_ms: float
    cache: CacheInfo | None = Field(default=None, description="only on a cache hit")
    e2e_ms: float | None = None


# Chat logprobs ({"content": [...]}) or completions logprobs (tokens, token_logprobs, ...).
Logprobs = dict[str, Any]


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: Logprobs | None
    finish_reason: str


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: str | None = Field(
        description="name@version of the adapter that answered; null: the base model"
    )
    choices: list[ChatChoice]
    usage: Usage
    switchyard: SwitchyardInfo


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: Logprobs | None
    finish_reason: str


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str | None = Field(
        description="name@version of the adapter that answered; null: the base model"
    )
    choices: list[CompletionChoice]
    usage: Usage
    switchyard: SwitchyardInfo


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    logprobs: Logprobs | None
    finish_reason: str | None


class ChatCompletionChunk(BaseModel):
    """One `data:` event of a chat stream; the last (stream_options.include_usage) has usage."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str | None = Field(
        description="name@version of the adapter that answered; null: the base model"
    )
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    switchyard: SwitchyardInfo | None = None


class CompletionChunkChoice(BaseModel):
    index: int
    text: str
    logprobs: Logprobs | None
    finish_reason: str | None


class CompletionChunk(BaseModel):
    """One `data:` event of a completions stream."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str | None = Field(
        description="name@version of the adapter that answered; null: the base model"
    )
    choices: list[CompletionChunkChoice]
    usage: Usage | None = None
    switchyard: SwitchyardInfo | None = None


def sse_responses(chunk: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route that streams with `stream: true`: its events' model, by name."""
    return {
        200: {
            "description": f"JSON, or with `stream: true` server-sent events: `data: <{chunk}>` ... `data: [DONE]`",
            "content": {
                "text/event-stream": {"schema": {"type": "string", "description": f"{chunk} events"}}
            },
        }
    }


class AsyncRequestStatus(BaseModel):
    """GET /v1/requests/{id} (and the answer to POST): `result` once completed, `error` once failed."""

    id: str
    object: Literal["request"]
    endpoint: str
    status: Literal["queued", "completed", "failed"]
    created: float
    finished: float | None
    result: ChatCompletion | Completion | None = None
    error: ErrorInfo | None = None


class FileList(BaseModel):
    object: Literal["list"]
    data: list[FileObject]
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"]
    deleted: bool


Batch = BatchObject


class BatchList(BaseModel):
    object: Literal["list"]
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
