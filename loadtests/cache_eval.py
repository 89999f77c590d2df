"""Offline evaluation of the cache's hit decision: precision, recall and false-hit rate vs threshold.

Data: fow-cache's 600 labelled question pairs (300 should-hit: near_repeat/paraphrase; 300 traps:
negation, entity_swap, number_date, scope) plus an own set generated below from templates
(`own_pairs`: each template yields a paraphrase pair and near-miss negatives by swapping a number,
negating, swapping the two entities, or changing the scope noun; plus one-slot swaps of other
meaning in fixed frames, SLOT_FRAMES x SLOT_SWAPS). Each pair (a = cached prompt,
b = new prompt) is scored with MiniLM cosine (the embedder the cache uses); a "hit" is cosine >=
threshold, and with the verifier also `Verifier.check(b, a, cosine)`. Milvus is not involved (a
pair's top-1 candidate is its partner). Run: `python -m loadtests.cache_eval [--json out.json]`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from services.cache.embed import load_minilm
from services.cache.verify import Verifier

TEMPLATES = [
    ("How do I cancel order {n} from {x}?", "How can I cancel my {x} order {n}?", "{y}"),
    (
        "Can I return {thing} bought in {x} after {n} days?",
        "Is it possible to return {thing} from {x} after {n} days?",
        "{y}",
    ),
    (
        "What is the fee for sending {n} parcels to {x}?",
        "How much does it cost to send {n} parcels to {x}?",
        "{y}",
    ),
    ("Does the {thing} plan include {x} support?", "Is {x} support part of the {thing} plan?", "{y}"),
]
FILL = [
    {"n": "3", "m": "5", "x": "Amazon", "y": "eBay", "thing": "shoes", "other": "laptops"},
    {"n": "14", "m": "30", "x": "France", "y": "Spain", "thing": "premium", "other": "basic"},
    {"n": "2", "m": "20", "x": "Germany", "y": "Italy", "thing": "family", "other": "student"},
]


# One slot of a frame swapped for a word of another meaning (written after reading no cache
# output): the verifier's one-slot and opposite rules are what must refuse these, at cosines up to
# 0.97 (peak/off-peak, front/back, short-term/long-term).
SLOT_FRAMES = [
    "Can I {} a bike here?",
    "How much is a {} ticket?",
    "What is the {} limit?",
    "Is the {} entrance open?",
    "How do I get a {} pass?",
    "What are the rules for {} parking?",
    "Where is the {} exit?",
    "How do I change my {} payment?",
]
SLOT_SWAPS = [
    ("buy", "rent"),
    ("left", "right"),
    ("weekly", "monthly"),
    ("daily", "weekly"),
    ("summer", "winter"),
    ("north", "south"),
    ("front", "back"),
    ("upper", "lower"),
    ("annual", "monthly"),
    ("student", "senior"),
    ("adult", "child"),
    ("first-class", "second-class"),
    ("peak", "off-peak"),
    ("male", "female"),
    ("hot", "cold"),
    ("short-term", "long-term"),
    ("single", "double"),
    ("domestic", "international"),
    ("main", "side"),
    ("east", "west"),
    ("morning", "afternoon"),
]


def own_pairs() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for a_t, b_t, _ in TEMPLATES:
        for f in FILL:
            a = a_t.format(**f)
            out.append({"category": "own_paraphrase", "a": a, "b": b_t.format(**f), "same_answer": True})
            out.append(
                {
                    "category": "own_number",
                    "a": a,
                    "b": b_t.format(**{**f, "n": f["m"]}),
                    "same_answer": False,
                }
            )
            out.append(
                {
                    "category": "own_entity",
                    "a": a,
                    "b": b_t.format(**{**f, "x": f["y"]}),
                    "same_answer": False,
                }
            )
            out.append(
                {
                    "category": "own_scope",
                    "a": a,
                    "b": b_t.format(**{**f, "thing": f["other"]}),
                    "same_answer": False,
                }
            )
            neg = (
                b_t.format(**f)
                .replace("Can I", "Can't I")
                .replace("Does", "Doesn't")
                .replace("Is ", "Isn't ")
            )
            if neg != b_t.format(**f):
                out.append({"category": "own_negation", "a": a, "b": neg, "same_answer": False})
    for frame in SLOT_FRAMES:
        for x, y in SLOT_SWAPS:
            out.append(
                {"category": "own_slot", "a": frame.format(x), "b": frame.format(y), "same_answer": False}
            )
    # A substitution whose slot is not in the template leaves the paraphrase unchanged: not a negative.
    paraphrases = {(p["a"], p["b"]) for p in out if p["same_answer"]}
    return [p for p in out if p["a"] != p["b"] and (p["same_answer"] or (p["a"], p["b"]) not in paraphrases)]


def score(
    pairs: list[dict[str, object]], sims: np.ndarray, thr: float, verifier: Verifier | None
) -> dict[str, float]:
    tp = fp = pos = neg = 0
    for p, s in zip(pairs, sims, strict=True):
        hit = s >= thr and (verifier is None or verifier.check(str(p["b"]), str(p["a"]), float(s)).ok)
        if p["same_answer"]:
            pos += 1
            tp += hit
        else:
            neg += 1
            fp += hit
    return {
        "threshold": thr,
        "recall": tp / max(pos, 1),
        "false_hit_rate": fp / max(neg, 1),
        "precision": tp / max(tp + fp, 1),
    }


def shared_store(
    pairs: list[dict[str, object]],
    va: np.ndarray,
    vb: np.ndarray,
    floor: float,
    verifier: Verifier | None,
) -> dict[str, float]:
    """Every cached prompt (`a`) in one store; each `b` looks up its top-1 over all of them, as the
    cache does. served = the partner's answer came back for a should-hit pair; false hit = the
    partner's answer came back for a trap; other = some other entry came back."""
    texts = list(dict.fromkeys(str(p["a"]) for p in pairs))
    index = {t: i for i, t in enumerate(texts)}
    mat = np.stack([va[[str(p["a"]) for p in pairs].index(t)] for t in texts])
    return _protocol(pairs, lambda j: _ours(pairs[j], vb[j], mat, texts, index, floor, verifier))


def _ours(p, vec, mat, texts, index, floor, verifier):  # type: ignore[no-untyped-def]
    sims = mat @ vec
    top = int(np.argmax(sims))
    s = float(sims[top])
    if s < floor or (verifier is not None and not verifier.check(str(p["b"]), texts[top], s).ok):
        return None
    return texts[top]


def _protocol(pairs: list[dict[str, object]], answer) -> dict[str, float]:  # type: ignore[no-untyped-def]
    served = fh = other = pos = neg = 0
    for j, p in enumerate(pairs):
        got = answer(j)
        if p["same_answer"]:
            pos += 1
            served += got == p["a"]
        else:
            neg += 1
            fh += got == p["a"]
        other += got is not None and got != p["a"]
    return {
        "served": round(served / max(pos, 1), 4),
        "false_hit_rate": round(fh / max(neg, 1), 4),
        "other_entry_rate": round(other / max(len(pairs), 1), 4),
    }


def gptcache_baseline(
    pairs: list[dict[str, object]], va: np.ndarray, vb: np.ndarray, thresholds: list[float]
) -> dict[str, object]:
    """GPTCache 0.1.44 (sqlite + faiss, its SearchDistanceEvaluation) on the same pairs, the same
    MiniLM vectors and the shared-store protocol; its `similarity_threshold` is its own scale
    (0.8, its default, is cosine ~0.6 on normalised vectors)."""
    try:
        from gptcache import Cache, Config
        from gptcache.adapter.api import get, init_similar_cache, put
        from gptcache.processor.post import first
    except ImportError as exc:
        return {"ran": False, "why": f"gptcache not importable ({exc}); pip install '.[bench]'"}
    import shutil

    vecs = {str(p["a"]): v for p, v in zip(pairs, va, strict=True)}
    vecs.update({str(p["b"]): v for p, v in zip(pairs, vb, strict=True)})

    class SameMiniLM:
        dimension = va.shape[1]

        def to_embeddings(self, text: str, **_: object) -> np.ndarray:
            return vecs[text]

    out: dict[str, object] = {"ran": True, "version": "0.1.44", "store": "sqlite + faiss"}
    for thr in thresholds:
        d = Path("var/bench/gptcache") / f"{len(pairs)}-{thr}"  # faiss saves its index here at exit
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        c = Cache()
        init_similar_cache(
            data_dir=str(d),
            cache_obj=c,
            embedding=SameMiniLM(),
            post_func=first,
            config=Config(similarity_threshold=thr),
        )
        for t in dict.fromkeys(str(p["a"]) for p in pairs):
            put(t, t, cache_obj=c)
        t0 = time.perf_counter()
        res = _protocol(pairs, lambda j, c=c: get(str(pairs[j]["b"]), cache_obj=c))
        res["get_ms_mean"] = round((time.perf_counter() - t0) * 1000 / len(pairs), 3)
        out[f"similarity_threshold={thr}"] = res
    return out


def evaluate(default_floor: float = 0.80, verbose: bool = True) -> dict[str, object]:
    """Precision/recall/false-hit rate by threshold, cosine only and with the verifier."""
    from fow_cache.data import load_questions

    encode = load_minilm()
    sets = {"fow-cache": load_questions(), "own": own_pairs()}
    report: dict[str, object] = {"embedder": "all-MiniLM-L6-v2 (sentence-transformers, cpu)"}
    for name, pairs in sets.items():
        t0 = time.perf_counter()
        va = encode([str(p["a"]) for p in pairs])
        vb = encode([str(p["b"]) for p in pairs])
        sims = (va * vb).sum(axis=1)
        emb_ms = (time.perf_counter() - t0) * 1000
        v = Verifier()
        t1 = time.perf_counter()
        for p, s in zip(pairs, sims, strict=True):
            v.check(str(p["b"]), str(p["a"]), float(s))
        verify_us = (time.perf_counter() - t1) / len(pairs) * 1e6
        rows = []
        for thr in [0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99]:
            rows.append(
                {"cosine_only": score(pairs, sims, thr, None), "with_verifier": score(pairs, sims, thr, v)}
            )
        d = score(pairs, sims, default_floor, v)
        # The verifier's rules were written while reading fow-cache's misses: the two halves
        # (even / odd pairs) show how far the default moves between subsets.
        halves = {h: score(pairs[i::2], sims[i::2], default_floor, v) for h, i in (("even", 0), ("odd", 1))}
        shared = {
            "switchyard_default": shared_store(pairs, va, vb, default_floor, v),
            "cosine_only_at_default_floor": shared_store(pairs, va, vb, default_floor, None),
            "gptcache": gptcache_baseline(pairs, va, vb, [0.8, 0.9, 0.95]),
        }
        report[name] = {
            "pairs": len(pairs),
            "embed_ms_total": round(emb_ms, 1),
            "verify_us_per_pair": round(verify_us, 1),
            "curve": rows,
            "default": d,
            "default_by_half": halves,
            "shared_store": shared,
        }
        if verbose:
            print(f"== {name}: {len(pairs)} pairs; verifier {verify_us:.1f} us/pair")
            print("thr    cosine: recall  FHR   prec | verifier: recall  FHR   prec")
            for r in rows:
                c, w = r["cosine_only"], r["with_verifier"]
                print(
                    f"{c['threshold']:.2f}          {c['recall']:.3f} {c['false_hit_rate']:.3f} {c['precision']:.3f} |"
                    f"           {w['recall']:.3f} {w['false_hit_rate']:.3f} {w['precision']:.3f}"
                )
            print(f"default floor {default_floor}: {d}")
            print(f"default by half: {halves}")
            print(f"shared store (top-1 over all cached prompts): {json.dumps(shared, indent=1)}")
    report["summary"] = {
        name: {"default_floor": default_floor, **report[name]["default"]}  # type: ignore[index]
        for name in sets
    }
    return report


async def run(out: Path, quick: bool = False) -> dict[str, object]:
    """`make bench` entry (scenario cache-eval)."""
    return evaluate()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--default-floor", type=float, default=0.80)
    args = ap.parse_args()
    report = evaluate(args.default_floor)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
