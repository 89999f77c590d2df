"""The cache's learned pair model (services/cache/pairmodel.py, issue #35): the committed weights
are what training fits on the dev split, the runtime scorer is sklearn's model, the features are
deterministic, and the model vetoes near misses the verifier lets through while serving
paraphrases. Pairs below are written for these tests, not taken from loadtests/cache_data; their
cosines are all-MiniLM-L6-v2's."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from loadtests.cache_data import load
from loadtests.cache_eval import decision
from loadtests.cache_eval.train import COSINES, data_hash, dev_data, dump, export, final_model, fit
from services.cache import pairfeatures
from services.cache.lexicon import wordnet
from services.cache.pairfeatures import FEATURES, features
from services.cache.pairmodel import MODEL_PATH, VETO_REASON, PairModel, _scorer
from services.cache.verify import Verdict

# (cached prompt, new prompt, cosine): different questions that a verifier pass must not serve.
# The first three pass the verifier as it stands.
HOSTILE = [
    (
        "How long should I roast a whole chicken?",
        "What temperature should I roast a whole chicken at?",
        0.857,
    ),
    ("Who taught Plato?", "Who did Plato teach?", 0.970),
    ("Where can I park near the stadium?", "When can I park near the stadium?", 0.917),
    ("Can I bring my dog on the train this weekend?", "Can I bring my dog on the train next weekend?", 0.988),
    ("How long should I boil an egg?", "What temperature should I boil an egg at?", 0.839),
    (
        "How do I forward emails from Gmail to Outlook?",
        "How do I forward emails from Outlook to Gmail?",
        0.997,
    ),
    ("Why does my cat chase my dog?", "Why does my dog chase my cat?", 0.997),
    (
        "Is Python faster than JavaScript for data processing?",
        "Is JavaScript faster than Python for data processing?",
        0.990,
    ),
]
PARAPHRASES = [
    ("How do I reset my router?", "How can I reset my router?", 0.996),
    ("What is the capital of Australia?", "what's the capital of australia", 0.903),
    ("Can I freeze cooked rice?", "Is it OK to freeze cooked rice?", 0.952),
    ("What's the best way to learn Spanish quickly?", "How can I learn Spanish fast?", 0.921),
    (
        "How do I move photos from my iPhone to my laptop?",
        "How can I transfer pictures from my iPhone to my laptop?",
        0.911,
    ),
]


@pytest.fixture(scope="module")
def model() -> PairModel:
    return PairModel.load()


@pytest.fixture(scope="module")
def spec() -> dict[str, object]:
    return json.loads(MODEL_PATH.read_text())  # type: ignore[no-any-return]


def test_the_committed_model_was_trained_on_this_dev_split_and_these_features(
    spec: dict[str, object],
) -> None:
    pairs = load("dev")
    assert spec["trained_on"]["split"] == "dev"  # type: ignore[index]
    assert spec["trained_on"]["sha256"] == data_hash(pairs)  # type: ignore[index]
    assert json.loads(COSINES.read_text())["sha256"] == data_hash(pairs)  # the cosines it used
    assert tuple(spec["features"]) == FEATURES  # type: ignore[arg-type]


def test_the_committed_model_is_what_training_fits(spec: dict[str, object]) -> None:
    """Refit the chosen config on the dev split (no CV): the same trees, to the last bit. When this
    fails after a change to the features or the verifier: `python -m loadtests.cache_eval.train`."""
    refit = final_model(dev_data(), spec["cv"]["config"])  # type: ignore[index]
    assert json.loads(dump({"model": refit}))["model"] == spec["model"]


def test_the_runtime_scorer_is_sklearns_model() -> None:
    """numpy evaluation of the exported trees (padded to one depth) and of a logistic model gives
    sklearn's own log-odds."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, len(FEATURES)))
    y = (X[:, 0] > 0.3) | ((X[:, 1] > 1.0) & (X[:, 2] < 0))  # pure leaves early: padding is exercised
    w = np.ones(len(y))
    for config in ({"model": "trees", "depth": 3, "trees": 30, "rate": 0.2}, {"model": "logistic", "C": 1.0}):
        sk = fit(config, X, y, w)
        spec = json.loads(dump({"model": export(sk)}))["model"]
        if spec["kind"] == "trees":
            assert any(t is None for row in spec["threshold"] for t in row)
        scorer = _scorer(spec)
        ours = np.asarray([scorer.raw(x) for x in X])
        np.testing.assert_allclose(ours, sk.decision_function(X), rtol=0, atol=1e-9)  # type: ignore[attr-defined]


def test_features_are_deterministic() -> None:
    lex = wordnet()
    pairs = HOSTILE + PARAPHRASES
    first = [features(b, a, c, lex) for a, b, c in pairs]
    pairfeatures._side.cache_clear()
    again = [features(b, a, c, lex) for a, b, c in reversed(pairs)][::-1]
    assert first == again
    assert all(len(f) == len(FEATURES) and all(np.isfinite(f)) for f in first)


@pytest.mark.parametrize(("old", "new", "cosine"), HOSTILE)
def test_vetoes_near_misses_the_verifier_passed(model: PairModel, old: str, new: str, cosine: float) -> None:
    assert model.p_same(new, old, cosine) < model.veto_at
    assert model.review(new, old, cosine, Verdict(True)) == Verdict(False, VETO_REASON)


@pytest.mark.parametrize(("old", "new", "cosine"), PARAPHRASES)
def test_serves_paraphrases(model: PairModel, old: str, new: str, cosine: float) -> None:
    assert model.accept(new, old, cosine)


def test_review_only_vetoes_passes_and_rescues_new_word_refusals(model: PairModel) -> None:
    old, new, cos = max(PARAPHRASES, key=lambda p: model.p_same(p[1], p[0], p[2]))
    assert model.p_same(new, old, cos) >= model.rescue_at
    # A refusal for numbers, negation, roles ... stands however sure the model is.
    assert model.review(new, old, cos, Verdict(False, "numbers")) == Verdict(False, "numbers")
    # A refusal only for the new-words floors is served when the model is sure.
    assert model.review(new, old, cos, Verdict(False, "novel_words")).ok
    hostile_old, hostile_new, hostile_cos = HOSTILE[0]
    assert not model.review(hostile_new, hostile_old, hostile_cos, Verdict(False, "novel_words")).ok
    # The same text is never reviewed.
    assert model.review(old, old, 0.5, Verdict(True)) == Verdict(True)


def test_decide_reviews_the_verifiers_verdict_with_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """decision.decide (lookup.py's decision for the evaluation) passes the verdict through the model."""
    old, new, cos = HOSTILE[0]
    assert decision._cache_parts()[1].check(new, old, cos).ok  # the verifier alone serves it
    assert not decision.decide(old, new, cos)
    monkeypatch.setattr(decision, "_pair_model", lambda: None)
    assert decision.decide(old, new, cos)


def test_cost_per_pair_is_measured(model: PairModel) -> None:
    """The figure for docs and benchmarks (no timed assert: shared CI cores). Cold: the first
    sight of both texts; warm: the texts seen before (a stored prompt meets many lookups)."""
    pairs = HOSTILE + PARAPHRASES
    pairfeatures._side.cache_clear()
    t0 = time.perf_counter()
    cold = [model.p_same(b, a, c) for a, b, c in pairs]
    t1 = time.perf_counter()
    warm = [model.p_same(b, a, c) for a, b, c in pairs]
    t2 = time.perf_counter()
    assert cold == warm
    print(
        f"pair model: {(t1 - t0) / len(pairs) * 1e6:.0f} us/pair cold, {(t2 - t1) / len(pairs) * 1e6:.0f} warm"
    )


def test_the_cache_lookup_reviews_with_the_model(model: PairModel) -> None:
    """SemanticCache (lookup.py, as stage.py builds it) serves a verifier pass the model doubts
    only without the model: the live path, not just the evaluation, goes through it."""
    import asyncio
    from dataclasses import replace

    from services.cache.lookup import SemanticCache
    from services.cache.policy import CachePolicy
    from services.cache.store import Entry
    from tests.helpers.envelopes import chat

    old, new, cos = HOSTILE[0]
    entry = Entry("e1", old, b"", "r0", 2**62, model_version="v1")

    class Store:
        has_stats = False

        def search(self, key, vec, k, at_ms=None, versions=()):  # type: ignore[no-untyped-def]
            return [replace(entry, similarity=cos)]

    class Embedder:
        last_batch_size = 1

        async def embed(self, text: str) -> np.ndarray:
            return np.zeros(384, dtype=np.float32)

    env = chat("q1", new, max_tokens=8)

    def lookup(pair_model: PairModel | None):  # type: ignore[no-untyped-def]
        cache = SemanticCache(Store(), Embedder(), CachePolicy(floor=0.8), pair_model=pair_model)  # type: ignore[arg-type]
        return asyncio.run(cache.lookup(env))

    assert lookup(None).hit  # the verifier alone serves it
    vetoed = lookup(model)
    assert not vetoed.hit and vetoed.reason == f"verifier:{VETO_REASON}"
