"""The cache evaluation's protocol (loadtests/cache_eval): Wilson intervals, the test split as
the reported one, failures shown for dev only, every kind in the summary, and the cache's own
decision behind every figure. Most tests use a stand-in embedder (fast); the last runs the real
MiniLM on a quick subsample of the test split (~30 s on CPU)."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from loadtests import cache_eval
from loadtests.cache_data import KINDS, SPLIT_SEED, load
from loadtests.cache_eval import report as report_mod
from services.cache.policy import CachePolicy
from services.cache.verify import Verdict
from shared.runtime.config import Settings


def fake_encode(texts: Sequence[str]) -> np.ndarray:
    """Unit vectors from a hash of the lower-cased text: near repeats that only change case get
    cosine 1, everything else some spread of cosines, without loading a model."""
    rows = []
    for t in texts:
        seed = int.from_bytes(hashlib.sha256(t.lower().rstrip("?.! ").encode()).digest()[:8], "big")
        v = np.random.default_rng(seed).normal(size=8) + 6.0  # all in one cone: cosines ~0.8-1
        rows.append(v / np.linalg.norm(v))
    return np.asarray(rows, dtype=np.float32)


@pytest.fixture(scope="module")
def test_report() -> dict[str, object]:
    return cache_eval.evaluate(encode=fake_encode, verbose=False)


@pytest.mark.parametrize(
    ("k", "n", "lower", "upper"),
    [
        (0, 10, 0.0, 0.2775),
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (50, 100, 0.4038, 0.5962),
        (1, 20, 0.0089, 0.2361),
    ],
)
def test_wilson_interval_matches_known_values(k: int, n: int, lower: float, upper: float) -> None:
    lo, hi = cache_eval.wilson(k, n)
    assert lo == pytest.approx(lower, abs=1e-4) and hi == pytest.approx(upper, abs=1e-4)


def test_wilson_edge_cases() -> None:
    assert cache_eval.wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        cache_eval.wilson(3, 2)
    r = cache_eval.rate(0, 80)
    assert r["rate"] == 0.0 and r["ci95"] == [0.0, 0.0458]


def test_the_reported_split_is_test(test_report: dict[str, object]) -> None:
    test = load("test")
    assert test_report["split"] == "test" and test_report["split_seed"] == SPLIT_SEED
    assert test_report["pairs"] == len(test) and len(test) < len(load())
    assert test_report["positives"] == sum(1 for p in test if p["same"])
    per_kind = Counter(str(p["kind"]) for p in test)
    assert {k: v["pairs"] for k, v in test_report["by_kind"].items()} == per_kind  # type: ignore[union-attr]
    assert "failures" not in test_report  # no per-pair outcomes for the test split, not even in JSON


def test_summary_has_every_kind_with_interval_and_counts(test_report: dict[str, object]) -> None:
    s = test_report["summary"]
    assert s["split"] == "test" and s["split_seed"] == SPLIT_SEED  # type: ignore[index]
    assert set(s["by_kind"]) == set(KINDS)  # type: ignore[index]
    for kind, row in s["by_kind"].items():  # type: ignore[index]
        assert row["pairs"] > 0 and row["metric"] == ("served" if kind == "paraphrase" else "false_hit")
        lo, hi = row["ci95"]
        assert 0.0 <= lo <= row["rate"] <= hi <= 1.0
    for key in ("served", "false_hit"):
        r = s[key]  # type: ignore[index]
        assert (r["k"], r["n"]) and r["ci95"] == [round(x, 4) for x in cache_eval.wilson(r["k"], r["n"])]
    assert s["positives"] + s["negatives"] == s["pairs"]  # type: ignore[index]


def test_every_figure_is_the_cache_decision(test_report: dict[str, object]) -> None:
    """Served / false-hit counts are decide() on the pairs' cosines, at the cache's floor."""
    pairs = load("test")
    sims = report_mod.cosines(pairs, fake_encode)
    hits = [cache_eval.decide(str(p["a"]), str(p["b"]), float(s)) for p, s in zip(pairs, sims, strict=True)]
    served = sum(h for p, h in zip(pairs, hits, strict=True) if p["same"])
    false = sum(h for p, h in zip(pairs, hits, strict=True) if not p["same"])
    assert test_report["served"]["k"] == served and test_report["false_hit"]["k"] == false  # type: ignore[index]
    assert test_report["floor"] == cache_eval.default_floor() == Settings().cache_similarity_floor


def test_decide_applies_the_floor_then_the_verifier() -> None:
    floor = cache_eval.default_floor()
    q = "How do I reset my password?"
    assert cache_eval.decide(q, q, 1.0)
    assert not cache_eval.decide(q, q, floor - 0.01)
    assert not cache_eval.decide(q, q, 0.99, floor=0.995)


def test_decide_asks_the_verifier_as_lookup_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """lookup.py: verifier.check(new prompt, stored prompt (first 2,000 characters), similarity)."""
    from loadtests.cache_eval import decision

    calls: list[tuple[str, str, float]] = []

    class Spy:
        def check(self, new: str, old: str, similarity: float) -> object:
            calls.append((new, old, similarity))
            return Verdict(False, "spy")

    monkeypatch.setattr(decision, "_cache_parts", lambda: (CachePolicy(floor=0.8), Spy()))
    long_a = "What is the boiling point of water? " * 100
    assert not cache_eval.decide(long_a, "new prompt", 0.9)
    assert calls == [("new prompt", long_a[:2000], 0.9)]
    assert not cache_eval.decide("a", "b", 0.79) and len(calls) == 1  # below the floor: not asked


def test_show_failures_is_refused_for_the_test_split(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--show-failures"], ["--split", "test", "--show-failures"]):
        with pytest.raises(SystemExit) as exc:
            cache_eval.main(argv)
        assert exc.value.code == 2
        assert "dev split only" in capsys.readouterr().err


def test_show_failures_lists_dev_pairs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(report_mod, "_minilm", lambda: fake_encode)
    cache_eval.main(["--split", "dev", "--show-failures", "--json", str(tmp_path / "dev.json")])
    out = capsys.readouterr().out
    dev_ids = {str(p["id"]) for p in load("dev")}
    shown = [
        line.rsplit("[", 1)[1].rstrip("]")
        for line in out.splitlines()
        if line.endswith("]") and " -> " in line
    ]
    assert shown and set(shown) <= dev_ids
    assert (tmp_path / "dev.json").read_text().count('"split": "dev"') >= 1


def test_benchmark_entry_reports_the_test_split_with_the_real_embedder(tmp_path: Path) -> None:
    result = asyncio.run(cache_eval.run(tmp_path, quick=True))
    s = result["summary"]
    assert s["split"] == "test" and s["quick"] is True and set(s["by_kind"]) == set(KINDS)
    assert 300 <= s["pairs"] < len(load("test"))
    # The verifier only ever removes hits that the floor let through.
    cos = s["cosine_only"]
    assert s["served"]["k"] <= cos["served"]["k"] and s["false_hit"]["k"] <= cos["false_hit"]["k"]
    assert s["served"]["rate"] > 0  # a real embedder serves some paraphrases
