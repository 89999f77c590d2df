"""Cache keys, policy and verifier: pure logic."""

from __future__ import annotations

from switchyard.v1.envelope_pb2 import AdapterRef, ChatMessage, MediaRef, Request, SamplingParams

from services.cache.keys import cache_key
from services.cache.policy import CachePolicy
from services.cache.verify import Verifier, entities, numbers
from shared.envelope import Envelope, Kind


def env(*turns: str, temperature: float | None = 0.0, **kw: object) -> Envelope:
    s = SamplingParams(max_tokens=8)
    if temperature is not None:
        s.temperature = temperature
    e = Envelope(
        request_id="r",
        tenant=str(kw.get("tenant", "acme")),
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        request=Request(messages=[ChatMessage(role="user", content=t) for t in turns], sampling=s),
    )
    if "adapter" in kw:
        e.adapter_ref.CopyFrom(AdapterRef(name="math", version=int(kw["adapter"])))  # type: ignore[call-overload]
    return e


def test_exact_key_covers_turns_adapter_params_media() -> None:
    base = cache_key(env("hi"))
    assert cache_key(env("hi")).exact == base.exact
    assert cache_key(env("hello")).exact != base.exact
    assert cache_key(env("hi", adapter=1)).exact != cache_key(env("hi", adapter=2)).exact
    e = env("hi")
    e.request.sampling.max_tokens = 9
    assert cache_key(e).exact != base.exact and cache_key(e).params_hash != base.params_hash
    e = env("hi")
    e.request.sampling.stream = True  # transport only
    assert cache_key(e).exact == base.exact
    e = env("hi")
    e.media.append(MediaRef(sha256="ab" * 32))
    assert cache_key(e).media_hash and cache_key(e).exact != base.exact
    assert cache_key(env("a", "hi")).context_hash != base.context_hash
    assert cache_key(env("a", "hi")).text == "hi"


def test_policy() -> None:
    p = CachePolicy(sampled_tenants=frozenset({"opt"}))
    assert p.bypass(env("x")) is None
    assert p.bypass(env("x", temperature=0.5)) == "sampled"
    assert p.bypass(env("x", temperature=None)) == "sampled"  # the engine's default is 1.0
    assert p.bypass(env("x", temperature=0.5, tenant="opt")) is None
    e = env("x")
    e.metadata["no_store"] = "1"
    assert p.bypass(e) == "no_store"
    assert p.storable(env("x")) == "no_choices"
    assert CachePolicy(tenant_floors={"acme": 0.9}).floor_for("acme") == 0.9


def test_verifier_rejects_near_misses_and_keeps_paraphrases() -> None:
    v = Verifier(novel_floor=0.9)
    assert not v.check("What happened in 1666?", "What happened in 1066?", 0.95).ok
    assert v.check("What's the rate on a two-year fix?", "What's the rate on a 2-year fix?", 0.95).ok
    assert not v.check("Don't reset my password", "Reset my password", 0.95).ok
    assert not v.check("Is the fee excluded?", "Is the fee included?", 0.97).ok
    assert not v.check("Who is the CEO of Apple?", "Who is the CEO of Microsoft?", 0.95).ok
    assert not v.check("Move my ISA from Vanguard to Aviva", "Move my ISA from Aviva to Vanguard", 0.99).ok
    assert not v.check("Discounts for students?", "Discounts for nonprofits?", 0.85).ok
    assert v.check("How do I change energy supplier?", "How do I switch energy supplier?", 0.93).ok
    assert v.check("Where is my invioce history?", "where is my invoice history?", 0.95).ok
    assert numbers("two 2 1,000") == {"2": 2, "1000": 1}
    assert entities("Send it to Paris. Then Rome") == ["paris", "rome"]
