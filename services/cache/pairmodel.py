"""A learned second opinion on the verifier's borderline verdicts (issue #35).

The verifier (verify.py) is a set of exact rules; what passes them and is still a different
question (a role swap its patterns miss, "how long" vs "what temperature", "this" vs "next
weekend") differs in many small ways at once. This model weighs them together: features of how
the two prompts' words align (pairfeatures.py) and a small model (gradient-boosted trees or a
logistic regression, whichever grouped cross-validation chose) trained on the dev split of
loadtests/cache_data (`python -m loadtests.cache_eval.train` writes pair_model.json beside this
file: weights, feature names, the training data's hash, the cross-validated figures). numpy
only at run time; 0.15-0.3 ms a pair, nearly all of it the features.

It only reviews what the verifier decided, never the cosine floor or the entry's threshold:
- a candidate the verifier passed below `upper` (cosine) is vetoed when p_same < `veto_at`;
- a candidate the verifier refused only for its novel- or added-words floor (`rescue_reasons`)
  is served when p_same >= `rescue_at` (a value above 1 turns rescues off).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .lexicon import WordNet, wordnet
from .pairfeatures import FEATURES, features
from .verify import Verdict

MODEL_PATH = Path(__file__).with_name("pair_model.json")
VETO_REASON = "pair_model"


@dataclass(frozen=True)
class Trees:
    """Boosted regression trees laid out as complete binary trees of one depth: node k's children
    are 2k+1 and 2k+2, leaves are indexed after the last level. Leaves above that depth were pushed
    down with an always-left split (threshold +inf), so every tree is evaluated in `depth` steps."""

    depth: int
    feature: np.ndarray  # (trees, 2**depth - 1) int
    threshold: np.ndarray  # (trees, 2**depth - 1) float64; go right when x > threshold
    leaf: np.ndarray  # (trees, 2**depth) float64, already scaled by the learning rate
    bias: float

    def raw(self, x: np.ndarray) -> float:
        """The ensemble's log-odds for one feature vector (compared in float32, as sklearn does)."""
        x = x.astype(np.float32).astype(np.float64)
        rows = np.arange(self.feature.shape[0])
        node = np.zeros(len(rows), dtype=np.int64)
        for _ in range(self.depth):
            right = x[self.feature[rows, node]] > self.threshold[rows, node]
            node = 2 * node + 1 + right
        leaves = node - (2**self.depth - 1)
        return self.bias + float(self.leaf[rows, leaves].sum())


@dataclass(frozen=True)
class Linear:
    """Logistic regression over standardised features."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    bias: float

    def raw(self, x: np.ndarray) -> float:
        return self.bias + float(((x - self.mean) / self.scale) @ self.coef)


def _scorer(spec: dict[str, object]) -> Trees | Linear:
    """The JSON's model part as a scorer: {"kind": "trees", ...} or {"kind": "logistic", ...}."""
    if spec["kind"] == "logistic":
        return Linear(
            *(np.asarray(spec[k], dtype=np.float64) for k in ("mean", "scale", "coef")), float(spec["bias"])
        )  # type: ignore[arg-type]
    return Trees(
        depth=int(spec["depth"]),  # type: ignore[call-overload]
        feature=np.asarray(spec["feature"], dtype=np.int64),
        threshold=np.asarray(
            [[math.inf if v is None else v for v in r] for r in spec["threshold"]],  # type: ignore[attr-defined]
            dtype=np.float64,
        ),
        leaf=np.asarray(spec["leaf"], dtype=np.float64),
        bias=float(spec["bias"]),  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class PairModel:
    scorer: Trees | Linear
    veto_at: float  # p_same below this vetoes a candidate the verifier passed
    rescue_at: float  # p_same at or above this serves a candidate refused only for new words
    upper: float  # at or above this cosine the verifier's pass stands unreviewed
    rescue_reasons: tuple[str, ...] = ("novel_words", "added_words")
    lexicon: WordNet | None = None

    @classmethod
    def load(cls, path: Path = MODEL_PATH, lexicon: WordNet | None = None) -> PairModel:
        """The committed model (pair_model.json); features must match this code's FEATURES."""
        spec = json.loads(path.read_text())
        if tuple(spec["features"]) != FEATURES:
            raise ValueError(f"{path} was trained on other features; retrain (loadtests.cache_eval.train)")
        d = spec["decision"]
        return cls(
            _scorer(spec["model"]),
            veto_at=float(d["veto_at"]),
            rescue_at=float(d["rescue_at"]),
            upper=float(d["upper"]),
            rescue_reasons=tuple(d["rescue_reasons"]),
            lexicon=lexicon if lexicon is not None else wordnet(),
        )

    def p_same(self, new: str, old: str, cosine: float) -> float:
        """Probability that `new` asks what `old` (the cached prompt) asked, at this cosine."""
        x = np.asarray(features(new, old, cosine, self.lexicon), dtype=np.float64)
        return 1.0 / (1.0 + math.exp(-self.scorer.raw(x)))

    def review(self, new: str, old: str, cosine: float, verdict: Verdict) -> Verdict:
        """The verifier's verdict, vetoed or rescued by the model (see the module doc)."""
        if verdict.ok:
            if cosine >= self.upper or new.strip() == old.strip():
                return verdict
            if self.p_same(new, old, cosine) < self.veto_at:
                return Verdict(False, VETO_REASON)
            return verdict
        if verdict.reason in self.rescue_reasons and self.p_same(new, old, cosine) >= self.rescue_at:
            return Verdict(True, f"{VETO_REASON}:rescued:{verdict.reason}")
        return verdict

    def accept(self, new: str, old: str, cosine: float, verdict: Verdict | None = None) -> bool:
        """Would the reviewed verdict serve? Without a verdict: as if the verifier had passed it."""
        return self.review(new, old, cosine, verdict or Verdict(True)).ok


@lru_cache(maxsize=1)
def pair_model() -> PairModel | None:
    """The shared committed model, or None when its file is missing."""
    return PairModel.load() if MODEL_PATH.exists() else None
