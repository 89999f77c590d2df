"""The error budget: each entry learns its own acceptance threshold from checked reuses (pure).

Why: one cosine floor is too loose for some prompts and too strict for others (vCache, ICLR 2026:
thresholds learned per cached prompt under a user-set error bound). Each entry keeps the outcomes
of its checked reuses (shadow checks of its hits, and misses near it whose engine answer was
compared with it: services/cache/shadow.py) as counts of (correct, wrong) per similarity bin of
0.001 (vCache rounds to 3 decimals too). From them:

- no outcome: the threshold is the tenant's floor, as without the budget (then the verifier);
- otherwise the threshold is the lowest similarity t at or above the lowest floor where either
  (a) t is the similarity of an observed reuse and the upper end of the Wilson 95% interval of
  the wrong share among the reuses at or above t is within the tenant's target, or
  (b) t is at or above the tenant's floor and no reuse at or above t was wrong.
  So a wrong reuse at s lifts the threshold above s until enough correct reuses at or below s
  say otherwise, and many correct reuses below the floor lower it to them (never below the lowest
  floor: the global floor, or the tenant's when that is lower). Evidence is never extrapolated
  below the lowest similarity actually checked.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

BINS = 1000  # similarity bins per unit: outcomes are kept at 0.001 resolution
Z95 = 1.959963984540054  # two-sided 95% normal quantile
MAX_COUNT = 10**6  # per bin and outcome; past it the counts stop growing (the share stays right)


def bin_of(similarity: float) -> int:
    """The bin a similarity falls in (the epsilon keeps 0.29 in bin 290 despite 0.29 * 1000)."""
    return max(0, min(BINS, math.floor(similarity * BINS + 1e-6)))


def edge_of(floor: float) -> int:
    """The first bin at or above a floor."""
    return max(0, min(BINS, math.ceil(floor * BINS - 1e-6)))


def wilson(wrong: int, n: int, z: float = Z95) -> tuple[float, float, float]:
    """Share of wrong outcomes with its Wilson score interval: (estimate, lower, upper)."""
    if n <= 0:
        return 0.0, 0.0, 1.0
    p = wrong / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return p, max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True, slots=True)
class EntryStats:
    """An entry's checked reuses: similarity bin -> (correct, wrong) counts."""

    bins: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return sum(ok + bad for ok, bad in self.bins.values())

    def __bool__(self) -> bool:
        return bool(self.bins)

    def add(self, similarity: float, correct: bool) -> EntryStats:
        """A copy with one more outcome at `similarity`."""
        b = bin_of(similarity)
        ok, bad = self.bins.get(b, (0, 0))
        ok, bad = (min(ok + 1, MAX_COUNT), bad) if correct else (ok, min(bad + 1, MAX_COUNT))
        return EntryStats({**self.bins, b: (ok, bad)})

    def encode(self) -> str:
        """`bin:correct:wrong` comma-separated, highest bin first (the Milvus `stats` field)."""
        return ",".join(f"{b}:{ok}:{bad}" for b, (ok, bad) in sorted(self.bins.items(), reverse=True))

    @classmethod
    def decode(cls, text: str) -> EntryStats:
        """The encoded form back; anything malformed reads as no evidence (the floor applies)."""
        bins: dict[int, tuple[int, int]] = {}
        try:
            for part in filter(None, text.split(",")):
                b, ok, bad = (int(x) for x in part.split(":"))
                if 0 <= b <= BINS and ok >= 0 and bad >= 0:
                    bins[b] = (min(ok, MAX_COUNT), min(bad, MAX_COUNT))
        except ValueError:
            return cls()
        return cls(bins)


@dataclass(frozen=True, slots=True)
class Threshold:
    """Where an entry's reuses start: `floor` with no evidence, else bin `edge`."""

    floor: float
    edge: int | None = None

    def accepts(self, similarity: float) -> bool:
        if self.edge is None:
            return similarity >= self.floor
        return similarity >= self.floor and bin_of(similarity) >= self.edge

    @property
    def value(self) -> float:
        return self.floor if self.edge is None else max(self.floor, self.edge / BINS)

    @property
    def learned(self) -> bool:
        return self.edge is not None


def threshold(stats: EntryStats, prior: float, lowest: float, target: float, z: float = Z95) -> Threshold:
    """The entry's threshold (module docstring): `prior` is the tenant's floor, `lowest` the floor
    nothing goes below, `target` the tenant's false-hit rate."""
    if not stats:
        return Threshold(prior)
    lowest = min(lowest, prior)
    lo, top = edge_of(lowest), edge_of(prior)
    wrong_bins = [b for b, (_, bad) in stats.bins.items() if bad]
    best = max(top, max(wrong_bins) + 1) if wrong_bins else top  # (b)
    n = wrong = 0
    for b in sorted(stats.bins, reverse=True):  # (a): regions "at or above b", widening
        ok, bad = stats.bins[b]
        n, wrong = n + ok + bad, wrong + bad
        if b >= lo and b < best and wilson(wrong, n, z)[2] <= target:
            best = b
    return Threshold(lowest, best)


class BudgetBook:
    """This replica's newest view of entries' outcomes, beside what Milvus returned with them.

    Why: a check updates the entry in Milvus (shared by the replicas, gone with the entry), but the
    replica that judged it should not wait for the rewrite to be read back, and a collection from
    before the `stats` field keeps its outcomes here only. The view with more outcomes wins.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._stats: OrderedDict[str, EntryStats] = OrderedDict()

    def __len__(self) -> int:
        return len(self._stats)

    def view(self, entry_id: str, stored: str = "") -> EntryStats:
        """The entry's outcomes: this replica's copy or Milvus' (`stored`), whichever has more."""
        mine = self._stats.get(entry_id)
        theirs = EntryStats.decode(stored) if stored else EntryStats()
        if mine is None or theirs.n > mine.n:
            return theirs
        return mine

    def put(self, entry_id: str, stats: EntryStats) -> None:
        self._stats[entry_id] = stats
        self._stats.move_to_end(entry_id)
        while len(self._stats) > self.capacity:
            self._stats.popitem(last=False)
