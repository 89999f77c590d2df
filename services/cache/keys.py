"""Cache keys and scope of a request: pure functions of the envelope, no I/O.

- exact key: sha256 of the normalised request (model, adapter name@version, kind, every message
  with its role, the prompt, the sampling parameters that change the output, media sha256s);
- scope: the fields a semantic candidate must share exactly (tenant, model, adapter@version,
  media hash, conversation-context hash = every turn but the last, output-changing params);
- the text that is embedded: the last user turn (or the completion prompt).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from shared.runtime.envelope import Envelope

# SamplingParams fields that change what the engine returns (`stream` only changes the transport).
OUTPUT_PARAMS = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "n",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_tokens",
    "top_logprobs",
    "min_p",
    "ignore_eos",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
)
# Repeated and map fields that change the output; in the key only when set, so the key of a
# request without them is what it was before they existed (entries already stored still match).
OUTPUT_LISTS = ("stop_token_ids", "allowed_token_ids", "bad_words")


def _sha(obj: object) -> str:
    raw = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


def _message(m: object) -> list[object]:
    parts = [[p.type, p.text] for p in m.parts if p.type == "text"]  # type: ignore[attr-defined]
    return [m.role, m.content, parts, m.name]  # type: ignore[attr-defined]


def message_text(m: object) -> str:
    texts = [m.content] + [p.text for p in m.parts if p.type == "text"]  # type: ignore[attr-defined]
    return "\n".join(t for t in texts if t)


def adapter_label(env: Envelope) -> str:
    ref = env.adapter_ref
    return f"{ref.name}@{ref.version}" if ref.name else ""


def sampling_key(env: Envelope) -> dict[str, object]:
    s = env.request.sampling
    out: dict[str, object] = {
        f: round(float(getattr(s, f)), 6)
        for f in OUTPUT_PARAMS
        if s.HasField(f)  # type: ignore[arg-type]
    }
    out["stop"] = list(s.stop)
    out["logprobs"] = s.logprobs
    for f in OUTPUT_LISTS:
        if getattr(s, f):
            out[f] = list(getattr(s, f))
    if s.logit_bias:
        out["logit_bias"] = {str(t): round(float(b), 6) for t, b in sorted(s.logit_bias.items())}
    return out


@dataclass(frozen=True, slots=True)
class CacheKey:
    tenant: str
    model: str
    adapter: str  # name@version, "" for the base model
    exact: str
    context_hash: str
    media_hash: str
    params_hash: str
    text: str  # embedded for the semantic tier

    def scope(self) -> dict[str, str]:
        return {
            "tenant": self.tenant,
            "model": self.model,
            "adapter": self.adapter,
            "context_hash": self.context_hash,
            "media_hash": self.media_hash,
            "params_hash": self.params_hash,
        }


def cache_key(env: Envelope) -> CacheKey:
    msgs = list(env.request.messages)
    # Where each picture/clip sits matters: the same two images swapped is another question.
    media = sorted(f"{m.message_index}:{m.part_index}:{m.sha256}" for m in env.media)
    params = sampling_key(env)
    adapter = adapter_label(env)
    exact = _sha(
        {
            "model": env.model,
            "adapter": adapter,
            "kind": int(env.kind),
            "messages": [_message(m) for m in msgs],
            "prompt": env.request.prompt,
            "sampling": params,
            "media": media,
        }
    )
    # Everything before the last turn: a follow-up only ever matches the same conversation.
    context = _sha({"kind": int(env.kind), "turns": [_message(m) for m in msgs[:-1]]})
    text = message_text(msgs[-1]) if msgs else env.request.prompt
    return CacheKey(
        tenant=env.tenant,
        model=env.model,
        adapter=adapter,
        exact=exact,
        context_hash=context[:32],
        media_hash=_sha(media)[:32] if media else "",
        params_hash=_sha(params)[:32],
        text=text,
    )


def entry_id(tenant: str, request_id: str) -> str:
    """The primary key of the entry a response writes: one per request id (write-back dedupe)."""
    return hashlib.sha256(f"{tenant}\x00{request_id}".encode()).hexdigest()[:32]
