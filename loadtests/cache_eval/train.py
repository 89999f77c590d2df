"""`python -m loadtests.cache_eval.train [--embed] [--check]`: fit the cache's pair model
(services/cache/pairmodel.py) on the DEV split of loadtests/cache_data, never the test split.

1. Dev pairs, their MiniLM cosines (dev_cosines.json beside this file, keyed by the pairs' hash;
   `--embed` recomputes them with the cache's embedder), the verifier's verdict on each, and
   the pair features (services/cache/pairfeatures.py).
2. Training rows: every dev pair at or above the cosine floor, whatever the verifier said
   (its refusals teach what a near miss looks like: ~460 negatives, not the handful it passes),
   the pairs it passed weighted `w` times.
3. Grouped cross-validation (tune.py): 5 folds by family (no frame on both sides), stratified
   by kind, repeated 5 times; each model config's out-of-fold p_same gives the served and
   false-hit rates of the whole decision (floor, verifier, model) for each operating point
   (veto threshold, rescue threshold, cosine bound). The operating point and config chosen:
   least risk with dev served >= SERVED_MIN, where risk = the false hits among the negatives
   the verifier passes + as many again of kinds dev does not show, let through at the rate the
   model alone lets through all above-floor negatives (tune.rank). A nested run (thresholds
   chosen inside each outer fold) then estimates the whole procedure's figures.
4. The chosen config refitted on all training rows; services/cache/pair_model.json written
   (`--check`: compare with the committed file instead).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadtests.cache_data import load
from loadtests.cache_eval.decision import STORED_PROMPT_CHARS, _cache_parts, default_floor
from services.cache.pairfeatures import FEATURES, features
from services.cache.pairmodel import MODEL_PATH

SEED = 35
COSINES = Path(__file__).with_name("dev_cosines.json")
RESCUE_REASONS = ("novel_words", "added_words")


@dataclass(frozen=True)
class Data:
    """The dev split as the trainer sees it, one row per pair."""

    X: np.ndarray
    y: np.ndarray  # same (bool)
    ok: np.ndarray  # the verifier passed it
    rescuable: np.ndarray  # the verifier refused it only for its new-words floors
    cos: np.ndarray
    kind: np.ndarray
    family: np.ndarray
    floor: float
    sha256: str

    @property
    def candidates(self) -> np.ndarray:
        """Pairs a lookup would check (cosine at or above the floor): the training rows."""
        return self.cos >= self.floor


def data_hash(pairs: list[dict[str, object]]) -> str:
    """sha256 of the dev pairs' ids, texts, labels, kinds and families, in file order."""
    keys = ("id", "a", "b", "same", "kind", "family")
    blob = json.dumps([[p[k] for k in keys] for p in pairs], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def dev_cosines(pairs: list[dict[str, object]], embed: bool = False) -> np.ndarray:
    """Cosines of the dev pairs: from dev_cosines.json when it matches these pairs, else computed
    with the cache's embedder (report.cosines, one torch thread) and written there."""
    sha = data_hash(pairs)
    if not embed and COSINES.exists():
        stored = json.loads(COSINES.read_text())
        if stored["sha256"] == sha:
            return np.asarray([stored["cosine"][str(p["id"])] for p in pairs], dtype=np.float64)
    from loadtests.cache_eval.report import _minilm, cosines

    cos = cosines(pairs, _minilm())
    body = {
        "sha256": sha,
        "cosine": {str(p["id"]): round(float(c), 6) for p, c in zip(pairs, cos, strict=True)},
    }
    COSINES.write_text(json.dumps(body, indent=0, sort_keys=True) + "\n")
    return np.round(cos.astype(np.float64), 6)


def dev_data(embed: bool = False) -> Data:
    """Features, verdicts and labels of the dev split (the only split this module reads)."""
    pairs = load("dev")
    cos = dev_cosines(pairs, embed)
    _, verifier = _cache_parts()
    lex = verifier.lexicon
    rows, ok, resc = [], [], []
    for p, c in zip(pairs, cos, strict=True):
        new, old = str(p["b"]), str(p["a"])[:STORED_PROMPT_CHARS]
        v = verifier.check(new, old, float(c))
        ok.append(v.ok)
        resc.append(v.reason in RESCUE_REASONS)
        rows.append(features(new, old, float(c), lex))
    return Data(
        X=np.asarray(rows, dtype=np.float64),
        y=np.asarray([bool(p["same"]) for p in pairs]),
        ok=np.asarray(ok),
        rescuable=np.asarray(resc),
        cos=cos,
        kind=np.asarray([str(p["kind"]) for p in pairs]),
        family=np.asarray([str(p["family"]) for p in pairs]),
        floor=default_floor(),
        sha256=data_hash(pairs),
    )


def weights(data: Data, idx: np.ndarray, w: float) -> np.ndarray:
    """Rows the verifier passed (the ones the model will judge) count `w` times."""
    return np.where(data.ok[idx], w, 1.0)


def fit(config: dict[str, object], X: np.ndarray, y: np.ndarray, sw: np.ndarray) -> object:
    """One sklearn model for a config {"model": "trees"|"logistic", ...} (deterministic: seeded)."""
    if config["model"] == "logistic":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        lr = make_pipeline(StandardScaler(), LogisticRegression(C=float(config["C"]), max_iter=5000))  # type: ignore[arg-type]
        return lr.fit(X, y, logisticregression__sample_weight=sw)
    from sklearn.ensemble import GradientBoostingClassifier

    gb = GradientBoostingClassifier(
        n_estimators=int(config["trees"]),  # type: ignore[call-overload]
        max_depth=int(config["depth"]),  # type: ignore[call-overload]
        learning_rate=float(config["rate"]),  # type: ignore[arg-type]
        subsample=0.8,
        random_state=SEED,
    )
    return gb.fit(X, y, sample_weight=sw)


def export(model: object) -> dict[str, object]:
    """The fitted model as pair_model.json's "model" part (pairmodel._scorer reads it)."""
    if hasattr(model, "steps"):
        scaler, lr = model.steps[0][1], model.steps[-1][1]
        return {
            "kind": "logistic",
            "mean": scaler.mean_.tolist(),
            "scale": scaler.scale_.tolist(),
            "coef": lr.coef_[0].tolist(),
            "bias": float(lr.intercept_[0]),
        }
    depth = int(model.max_depth)  # type: ignore[attr-defined]
    lr_ = float(model.learning_rate)  # type: ignore[attr-defined]
    inner, leaves = 2**depth - 1, 2**depth
    feats, thresholds, values = [], [], []
    for est in model.estimators_[:, 0]:  # type: ignore[attr-defined]
        t = est.tree_
        f, th, v = [0] * inner, [None] * inner, [0.0] * leaves
        _lay(t, 0, 0, 0, depth, f, th, v, lr_)
        feats.append(f)
        thresholds.append(th)
        values.append(v)
    zero = np.zeros((1, len(FEATURES)))
    bias = float(model.decision_function(zero)[0]) - sum(  # type: ignore[attr-defined]
        lr_ * float(e.predict(zero.astype(np.float32))[0])
        for e in model.estimators_[:, 0]  # type: ignore[attr-defined]
    )
    return {
        "kind": "trees",
        "depth": depth,
        "feature": feats,
        "threshold": thresholds,
        "leaf": values,
        "bias": bias,
    }


def _lay(
    t: object, src: int, dst: int, level: int, depth: int, f: list, th: list, v: list, rate: float
) -> None:
    """Copy sklearn tree node `src` to complete-tree slot `dst`; a leaf above the last level
    becomes an always-left split (threshold None = +inf) so every path has `depth` steps."""
    left, right = t.children_left[src], t.children_right[src]  # type: ignore[attr-defined]
    if level == depth:
        v[dst - (2**depth - 1)] = rate * float(t.value[src][0][0])  # type: ignore[attr-defined]
        return
    if left == -1:
        f[dst], th[dst] = 0, None
        _lay(t, src, 2 * dst + 1, level + 1, depth, f, th, v, rate)
        _lay(t, src, 2 * dst + 2, level + 1, depth, f, th, v, rate)
        return
    f[dst], th[dst] = int(t.feature[src]), float(t.threshold[src])  # type: ignore[attr-defined]
    _lay(t, left, 2 * dst + 1, level + 1, depth, f, th, v, rate)
    _lay(t, right, 2 * dst + 2, level + 1, depth, f, th, v, rate)


def final_model(data: Data, config: dict[str, object]) -> dict[str, object]:
    """The config refitted on every training row, exported."""
    idx = np.where(data.candidates)[0]
    model = fit(config, data.X[idx], data.y[idx], weights(data, idx, float(config["w"])))  # type: ignore[arg-type]
    return export(model)


def dump(spec: dict[str, object]) -> str:
    """pair_model.json's text: indented, each list of numbers or names on one line."""
    text = json.dumps(spec, indent=1)
    return (
        re.sub(r"\[\s*([^\[\]{}]*?)\s*\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
        + "\n"
    )


def main(argv: list[str] | None = None) -> None:
    from loadtests.cache_eval.tune import select

    ap = argparse.ArgumentParser(
        prog="python -m loadtests.cache_eval.train", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--embed", action="store_true", help="recompute the dev cosines with MiniLM")
    ap.add_argument("--check", action="store_true", help="compare with the committed model, write nothing")
    args = ap.parse_args(argv)
    data = dev_data(args.embed)
    chosen = select(data)
    spec = {
        "features": list(FEATURES),
        "model": final_model(data, chosen["config"]),
        "decision": {**chosen["decision"], "rescue_reasons": list(RESCUE_REASONS)},
        "trained_on": {
            "split": "dev",
            "pairs": int(len(data.y)),
            "rows": int(data.candidates.sum()),
            "sha256": data.sha256,
            "floor": data.floor,
            "seed": SEED,
        },
        "cv": chosen["cv"],
    }
    text = dump(spec)
    if args.check:
        same = MODEL_PATH.exists() and MODEL_PATH.read_text() == text
        print("pair_model.json is " + ("what training writes" if same else "NOT what training writes"))
        sys.exit(0 if same else 1)
    MODEL_PATH.write_text(text)
    print(f"wrote {MODEL_PATH}", file=sys.stderr)


if __name__ == "__main__":
    main()
