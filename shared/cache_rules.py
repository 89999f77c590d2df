"""Which requests the cache may answer at all (pure): one rule for the cache and the stage before it.

The cache stage applies it to every lookup and write-back; preprocess applies the same rule to
send a request the cache could never answer (the cache off, a sampled or `no_store` request, a
rollout sample) straight to the router, so it does not pay a Kafka hop through a stage that would
only pass it on.
"""

from __future__ import annotations

from collections.abc import Collection

from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope

NO_STORE = "no_store"  # envelope metadata key: "1"/"true" = never store this request or its answer


def bypass_reason(env: Envelope, *, enabled: bool, sampled_tenants: Collection[str]) -> str | None:
    """Why this request must not be answered from (or written to) the cache; None = cacheable."""
    if not enabled:
        return "disabled"
    if env.metadata.get(NO_STORE, "").lower() in ("1", "true", "yes"):
        return "no_store"
    s = env.request.sampling
    # Unset temperature means 1.0 to the engine (OpenAI/vLLM default): sampled, not deterministic.
    temperature = s.temperature if s.HasField("temperature") else 1.0
    if temperature > 0 and env.tenant not in sampled_tenants:
        return "sampled"
    if s.n > 1 or s.logprobs:
        return "multi_or_logprobs"
    if not env.request.messages and not env.request.prompt:
        return "empty"
    return None


def has_media(env: Envelope) -> bool:
    """Images or audio in the request: their hashes enter the cache key only after preprocess."""
    return bool(len(env.media)) or any(p.type != "text" for m in env.request.messages for p in m.parts)


def cache_may_answer(env: Envelope, settings: Settings) -> bool:
    """True where the cache stage could serve this request (it still decides, and may miss)."""
    return (
        bypass_reason(env, enabled=settings.cache_enabled, sampled_tenants=settings.cache_sampled_tenants)
        is None
    )
