"""Bodies of vLLM's POST /tokenize and POST /detokenize, as vLLM 0.32's server takes and answers
them (vllm/entrypoints/serve/tokenize/protocol.py): a prompt or chat messages in, token ids out.

vLLM's two tokenize bodies (completion and chat) are one model here, so a bad body's error names
its field and nothing else. Only text is tokenized: media parts are refused by the route, and
vLLM's template overrides (chat_template, tools, mm_processor_kwargs) as unknown fields."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from shared.openai.protocol import ChatMessageIn

MAX_DETOKENIZE = 1 << 20  # token ids in one /detokenize body
_MODEL = "default: the vLLM pool's model"
_CHAT_ONLY = ("add_generation_prompt", "continue_final_message")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokenizeRequest(_Strict):
    """`prompt` (vLLM's TokenizeCompletionRequest) or `messages` (its TokenizeChatRequest)."""

    model: str | None = Field(default=None, min_length=1, max_length=256, description=_MODEL)
    prompt: str | None = Field(default=None, min_length=1)
    messages: list[ChatMessageIn] | None = Field(default=None, min_length=1)
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False
    add_special_tokens: StrictBool | None = Field(
        default=None,
        description="default: true for a prompt, false for messages (their chat template places them), as vLLM",
    )
    return_token_strs: StrictBool | None = False

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send either prompt or messages")
        if self.prompt is not None:
            chat_only = [f for f in _CHAT_ONLY if f in self.model_fields_set]
            if chat_only:
                raise ValueError(f"{', '.join(chat_only)} apply to messages only")
        if self.continue_final_message:
            # vLLM refuses both set; continue_final_message alone turns the generation prompt off.
            if "add_generation_prompt" in self.model_fields_set and self.add_generation_prompt:
                raise ValueError("cannot set both continue_final_message and add_generation_prompt to true")
            self.add_generation_prompt = False
        return self

    def specials(self) -> bool:
        if self.add_special_tokens is not None:
            return self.add_special_tokens
        return self.prompt is not None


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Strict):
    model: str | None = Field(default=None, min_length=1, max_length=256, description=_MODEL)
    tokens: list[Annotated[StrictInt, Field(ge=0, lt=2**63)]] = Field(max_length=MAX_DETOKENIZE)


class DetokenizeResponse(BaseModel):
    prompt: str
