"""Score one split of loadtests/cache_data with the cache's own decision (decision.py).

Per pair: MiniLM vectors of a and b (the cache's embedder, one torch thread so the cosines are
the same run to run), their cosine, then `decide(a, b, cosine)`. Positives (`same` = true) count
as served when the decision is a hit; negatives as false hits. Each rate comes with its Wilson
95% interval, overall and per kind, beside the cosine floor alone (no verifier) for scale.
Failing pairs are listed for the dev split only: the test split reports counts and rates.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from loadtests.cache_data import KINDS, SPLIT_SEED, load
from loadtests.cache_eval.decision import decide, default_floor
from loadtests.cache_eval.stats import fmt, rate

Encode = Callable[[Sequence[str]], np.ndarray]
Pair = dict[str, object]
QUICK_SHARE = 1 / 3  # quick mode: this share of each kind, drawn with the split seed


def _minilm() -> Encode:
    from services.cache.embed import load_minilm

    return load_minilm(threads=1)


def subsample(pairs: list[Pair], share: float, seed: int = SPLIT_SEED) -> list[Pair]:
    """`share` of each kind's pairs (rounded up; seeded), in their file order."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(pairs):
        by_kind[str(p["kind"])].append(i)
    rng = random.Random(seed)
    keep = sorted(i for idx in by_kind.values() for i in rng.sample(idx, math.ceil(share * len(idx))))
    return [pairs[i] for i in keep]


def cosines(pairs: list[Pair], encode: Encode) -> np.ndarray:
    """Cosine of each pair's a and b (the vectors are L2-normalised), each text embedded once."""
    texts = list(dict.fromkeys(str(p[k]) for p in pairs for k in ("a", "b")))
    vecs = encode(texts)
    at = {t: i for i, t in enumerate(texts)}
    va = vecs[[at[str(p["a"])] for p in pairs]]
    vb = vecs[[at[str(p["b"])] for p in pairs]]
    return (va * vb).sum(axis=1)


def _rates(pairs: list[Pair], hits: list[bool]) -> dict[str, object]:
    """Served rate on positives, false-hit rate on negatives; per kind, and both per source."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for p, hit in zip(pairs, hits, strict=True):
        for key in (("kind", str(p["kind"])), (str(p["source"]), str(p["same"])), ("all", str(p["same"]))):
            counts[key][0] += hit
            counts[key][1] += 1

    def of(key: tuple[str, str]) -> dict[str, object]:
        return rate(*counts[key]) if key in counts else rate(0, 0)

    by_kind = {
        k: {
            "pairs": of(("kind", k))["n"],
            "metric": "served" if k == "paraphrase" else "false_hit",
            **of(("kind", k)),
        }
        for k in KINDS
    }
    return {
        "served": of(("all", "True")),
        "false_hit": of(("all", "False")),
        "by_kind": by_kind,
        "by_source": {
            src: {"served": of((src, "True")), "false_hit": of((src, "False"))}
            for src in sorted({k[0] for k in counts} - {"kind", "all"})
        },
    }


def evaluate(
    split: str = "test",
    *,
    floor: float | None = None,
    quick: bool = False,
    encode: Encode | None = None,
    verbose: bool = True,
) -> dict[str, object]:
    """The split's served and false-hit rates under the cache's decision (see the module doc)."""
    pairs = load(split)
    if quick:
        pairs = subsample(pairs, QUICK_SHARE)
    used_floor = default_floor() if floor is None else floor
    t0 = time.perf_counter()
    sims = cosines(pairs, encode or _minilm())
    embed_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    hits = [decide(str(p["a"]), str(p["b"]), float(s), used_floor) for p, s in zip(pairs, sims, strict=True)]
    decide_us = (time.perf_counter() - t1) / max(len(pairs), 1) * 1e6
    report: dict[str, object] = {
        "split": split,
        "split_seed": SPLIT_SEED,
        "floor": used_floor,
        "quick": quick,
        "pairs": len(pairs),
        "positives": sum(1 for p in pairs if p["same"]),
        "negatives": sum(1 for p in pairs if not p["same"]),
        "decision": "cosine >= floor, then the cache's verifier (loadtests/cache_eval/decision.py)",
        "embedder": "all-MiniLM-L6-v2 (services.cache.embed.load_minilm, torch, 1 thread)",
        **_rates(pairs, hits),
        "cosine_only": _rates(pairs, [float(s) >= used_floor for s in sims]),
        "embed_s": round(embed_s, 2),
        "decide_us_per_pair": round(decide_us, 1),
    }
    if split == "dev":  # never for test: its pairs must not become tuning material
        report["failures"] = [
            {"id": p["id"], "kind": p["kind"], "cosine": round(float(s), 4), "a": p["a"], "b": p["b"]}
            for p, s, hit in zip(pairs, sims, hits, strict=True)
            if hit != p["same"]
        ]
    report["summary"] = summary(report)
    if verbose:
        print(table(report))
    return report


def summary(report: dict[str, object]) -> dict[str, object]:
    """The figures a benchmark run keeps: overall rates with intervals, per kind, counts, seed."""
    by_kind = report["by_kind"]
    cos = report["cosine_only"]
    return {
        "split": report["split"],
        "split_seed": report["split_seed"],
        "floor": report["floor"],
        "quick": report["quick"],
        "pairs": report["pairs"],
        "positives": report["positives"],
        "negatives": report["negatives"],
        "served": report["served"],
        "false_hit": report["false_hit"],
        "by_kind": {
            k: {f: v[f] for f in ("pairs", "metric", "rate", "ci95")}
            for k, v in by_kind.items()  # type: ignore[union-attr]
        },
        "cosine_only": {"served": cos["served"], "false_hit": cos["false_hit"]},  # type: ignore[index]
    }


def table(report: dict[str, object]) -> str:
    """The report as text: one line per kind, then overall, then the floor alone."""
    lines = [
        f"split {report['split']} (seed {report['split_seed']}), floor {report['floor']:.2f}"
        f"{', quick subsample' if report['quick'] else ''}: {report['pairs']} pairs, "
        f"{report['positives']} positives, {report['negatives']} negatives",
        f"{'kind':32s} {'metric':9s} rate   [Wilson 95%]   (k/n)",
    ]
    for kind, r in report["by_kind"].items():  # type: ignore[union-attr]
        lines.append(f"{kind:32s} {r['metric']:9s} {fmt(r)}")
    lines.append(f"{'all positives':32s} {'served':9s} {fmt(report['served'])}")  # type: ignore[arg-type]
    lines.append(f"{'all negatives':32s} {'false_hit':9s} {fmt(report['false_hit'])}")  # type: ignore[arg-type]
    for src, r in report["by_source"].items():  # type: ignore[union-attr]
        fh = "no negatives" if not r["false_hit"]["n"] else fmt(r["false_hit"])
        lines.append(f"  source {src:24s} served {fmt(r['served'])}, false hits {fh}")
    cos = report["cosine_only"]
    lines.append(
        f"cosine >= floor alone, no verifier: served {fmt(cos['served'])}, "  # type: ignore[index]
        f"false hits {fmt(cos['false_hit'])}"  # type: ignore[index]
    )
    return "\n".join(lines)
