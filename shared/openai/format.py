"""OpenAI JSON <-> Switchyard envelope, and the OpenAI response/chunk/error shapes."""

from __future__ import annotations

import time
from typing import Any

from switchyard.v1.envelope_pb2 import (
    ChatMessage,
    ContentPart,
    ImageUrl,
    InputAudio,
    Request,
    SamplingParams,
    TokenLogprob,
)
from switchyard.v1.events_pb2 import StreamDelta

from shared.openai.protocol import ChatCompletionRequest, CompletionRequest
from shared.runtime.envelope import Envelope, ErrorCode, Kind, Priority, Rejected
from shared.runtime.telemetry import breakdown

# Top-level timing entries are the stages and hops; entries with a "parent" attr refine one of them.


def _sampling(req: ChatCompletionRequest | CompletionRequest) -> SamplingParams:
    s = SamplingParams(stream=req.stream)
    limit = req.token_limit() if isinstance(req, ChatCompletionRequest) else req.max_tokens
    if limit is not None:
        s.max_tokens = limit
    for name in (
        "temperature",
        "top_p",
        "n",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "top_k",
        "min_tokens",
        "repetition_penalty",
        "min_p",
        "ignore_eos",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
    ):
        v = getattr(req, name)
        if v is not None:
            setattr(s, name, v)
    if req.stop:
        s.stop.extend(req.stop)  # type: ignore[arg-type]
    for name in ("stop_token_ids", "allowed_token_ids", "bad_words"):
        getattr(s, name).extend(getattr(req, name) or [])
    if req.logit_bias:
        s.logit_bias.update(req.logit_bias)
    if isinstance(req, ChatCompletionRequest):
        s.logprobs = req.logprobs
        if req.top_logprobs is not None:
            s.top_logprobs = req.top_logprobs
    elif req.logprobs is not None:
        s.logprobs = True
        s.top_logprobs = req.logprobs
    return s


def chat_message(m: Any) -> ChatMessage:
    out = ChatMessage(role=m.role, name=m.name or "")
    if isinstance(m.content, str):
        out.content = m.content
    elif m.content:
        for p in m.content:
            if p.type == "text":
                out.parts.append(ContentPart(type="text", text=p.text))
            elif p.type == "image_url":
                out.parts.append(
                    ContentPart(
                        type="image_url",
                        image_url=ImageUrl(
                            url=str(p.image_url.get("url", "")), detail=str(p.image_url.get("detail", ""))
                        ),
                    )
                )
            else:
                out.parts.append(
                    ContentPart(
                        type="input_audio",
                        input_audio=InputAudio(
                            data=str(p.input_audio.get("data", "")),
                            format=str(p.input_audio.get("format", "")),
                        ),
                    )
                )
    return out


def to_envelope(
    req: ChatCompletionRequest | CompletionRequest,
    *,
    request_id: str,
    tenant: str,
    deadline_unix_ms: int,
    reply_to: str = "",
) -> Envelope:
    """The request as an envelope; Rejected (400) when it has no wire form: text with no UTF-8 form
    (a lone surrogate written as "\\ud800" in the JSON) or a number out of its field's range."""
    try:
        return _to_envelope(req, request_id, tenant, deadline_unix_ms, reply_to)
    except ValueError as exc:
        raise Rejected(ErrorCode.INVALID_REQUEST, f"request cannot be encoded: {exc}") from exc


def _to_envelope(
    req: ChatCompletionRequest | CompletionRequest,
    request_id: str,
    tenant: str,
    deadline_unix_ms: int,
    reply_to: str,
) -> Envelope:
    env = Envelope(
        request_id=request_id,
        tenant=tenant,
        model=req.model,
        adapter=req.adapter or "",
        priority=Priority.PRIORITY_INTERACTIVE,
        deadline_unix_ms=deadline_unix_ms,
        reply_to=reply_to,
        created_unix_ns=time.time_ns(),
    )
    if isinstance(req, ChatCompletionRequest):
        env.kind = Kind.KIND_CHAT
        env.request.CopyFrom(
            Request(
                messages=[chat_message(m) for m in req.messages], sampling=_sampling(req), user=req.user or ""
            )
        )
    else:
        env.kind = Kind.KIND_COMPLETION
        env.request.CopyFrom(Request(prompt=req.prompt, sampling=_sampling(req), user=req.user or ""))  # type: ignore[arg-type]
    return env


def _usage(env: Envelope) -> dict[str, int]:
    u = env.response.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
    }


def pinned_adapter(env: Envelope) -> str | None:
    """`name@version` of the adapter that answered (pinned before the cache and the router);
    None for the base model. Replies carry it as `system_fingerprint` and `switchyard.adapter`."""
    ref = env.adapter_ref
    return f"{ref.name}@{ref.version}" if ref.name else None


def switchyard_info(env: Envelope, e2e_ms: float | None = None) -> dict[str, Any]:
    """Per-stage breakdown: hops ("queue") and stages in order; refinements carry a parent."""
    rows = breakdown(env)
    top = [r for r in rows if "parent" not in r]
    info: dict[str, Any] = {
        "request_id": env.request_id,
        "adapter": pinned_adapter(env),
        "pool": env.response.pool or env.pool,
        "worker": env.response.worker,
        "breakdown": rows,
        "stages_total_ms": round(sum(float(r["duration_ms"]) for r in top), 3),
    }
    if env.cache.hit:
        info["cache"] = {
            "hit": True,
            "tier": env.cache.tier,
            "similarity": env.cache.similarity,
            "entry_id": env.cache.entry_id,
        }
    if e2e_ms is not None:
        info["e2e_ms"] = round(e2e_ms, 3)
    return info


def reply_model(env: Envelope) -> str:
    """The name a reply is under: the adapter when one was asked for (as vLLM's server does)."""
    return env.adapter or env.model


def _lp(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def chat_logprobs(lps: Any) -> dict[str, Any]:
    """OpenAI chat `logprobs`: per token its text, logprob, UTF-8 bytes and top alternatives."""
    return {
        "content": [
            {**_lp(t.token, t.logprob), "top_logprobs": [_lp(x.token, x.logprob) for x in t.top]} for t in lps
        ]
    }


def completion_logprobs(lps: Any, text_offset: int = 0) -> dict[str, Any]:
    """OpenAI (legacy) completions `logprobs`; each position's alternatives include the sampled
    token, as vLLM's server lists them; `text_offset` is where the first token starts."""
    offsets = []
    for t in lps:
        offsets.append(text_offset)
        text_offset += len(t.token)
    return {
        "tokens": [t.token for t in lps],
        "token_logprobs": [t.logprob for t in lps],
        "top_logprobs": [{**{x.token: x.logprob for x in t.top}, t.token: t.logprob} for t in lps],
        "text_offset": offsets,
    }


def choice_logprobs(env: Envelope, lps: Any, text_offset: int = 0) -> dict[str, Any] | None:
    """A choice's (or a chunk's) `logprobs` in the request's format; None when not asked for."""
    if not env.request.sampling.logprobs:
        return None
    if env.kind == Kind.KIND_COMPLETION:
        return completion_logprobs(lps, text_offset)
    return chat_logprobs(lps)


def response_body(env: Envelope, created: int, e2e_ms: float | None = None) -> dict[str, Any]:
    """The whole reply to a chat or completions request (by the envelope's kind): the two shapes
    differ only in the id's prefix, the object name and where a choice's text goes."""
    completion = env.kind == Kind.KIND_COMPLETION
    return {
        "id": f"{'cmpl' if completion else 'chatcmpl'}-{env.request_id}",
        "object": "text_completion" if completion else "chat.completion",
        "created": created,
        "model": reply_model(env),
        "system_fingerprint": pinned_adapter(env),
        "choices": [
            {
                "index": c.index,
                **({"text": c.text} if completion else {"message": {"role": "assistant", "content": c.text}}),
                "logprobs": choice_logprobs(env, c.token_logprobs),
                "finish_reason": c.finish_reason or "stop",
            }
            for c in env.response.choices
        ],
        "usage": _usage(env),
        "switchyard": switchyard_info(env, e2e_ms),
    }


def chunk(
    kind: int,
    request_id: str,
    model: str,
    created: int,
    index: int,
    *,
    text: str | None = None,
    role: bool = False,
    finish_reason: str | None = None,
    logprobs: dict[str, Any] | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """One SSE chunk in OpenAI's streaming format; `fingerprint`: the pinned adapter, on every chunk."""
    if kind == Kind.KIND_COMPLETION:
        return {
            "id": f"cmpl-{request_id}",
            "object": "text_completion",
            "created": created,
            "model": model,
            "system_fingerprint": fingerprint,
            "choices": [
                {"index": index, "text": text or "", "logprobs": logprobs, "finish_reason": finish_reason}
            ],
        }
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
        delta["content"] = ""
    if text is not None:
        delta["content"] = text
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
    }


class StreamDeduper:
    """Forwards each choice's text once, across a redelivered (regenerated) attempt.

    Deltas carry the character offset of their text, so an overlap is cut exactly; a gap (a
    delta read out of order) is left for `remainder` to fill from the final response.
    """

    def __init__(self, n: int) -> None:
        self.sent_text = [""] * n
        self.sent_tokens = [0] * n  # logprob entries forwarded per choice (deduped by token offset)
        self.token_chars = [0] * n  # characters of the forwarded tokens: completions' text_offset

    def new_text(self, delta: StreamDelta) -> list[tuple[int, str]]:
        out = []
        for c in delta.choices:
            if c.index >= len(self.sent_text) or not c.text:
                continue
            sent = len(self.sent_text[c.index])
            if c.text_offset > sent or c.text_offset + len(c.text) <= sent:
                continue
            new = c.text[sent - c.text_offset :]
            self.sent_text[c.index] += new
            out.append((c.index, new))
        return out

    def new_logprobs(self, delta: StreamDelta) -> dict[int, tuple[list[TokenLogprob], int]]:
        """Per choice, the logprob entries not forwarded yet and the text offset of the first."""
        out: dict[int, tuple[list[TokenLogprob], int]] = {}
        for c in delta.choices:
            if c.index >= len(self.sent_tokens) or not c.logprobs:
                continue
            skip = self.sent_tokens[c.index] - c.token_offset
            if skip < 0:  # a gap: left for the final response
                continue
            new = list(c.logprobs[skip:])
            if new:
                out[c.index] = self._take(c.index, new)
        return out

    def remaining_logprobs(self, index: int, lps: Any) -> tuple[list[TokenLogprob], int]:
        """The final response's entries the stream did not carry."""
        return self._take(index, list(lps[self.sent_tokens[index] :]))

    def _take(self, index: int, new: list[TokenLogprob]) -> tuple[list[TokenLogprob], int]:
        offset = self.token_chars[index]
        self.sent_tokens[index] += len(new)
        self.token_chars[index] += sum(len(t.token) for t in new)
        return new, offset

    def remainder(self, index: int, full_text: str) -> str:
        """What the final response has that the stream did not carry (missed or late deltas)."""
        sent = self.sent_text[index] if index < len(self.sent_text) else ""
        return full_text[len(sent) :] if full_text.startswith(sent) else ""
