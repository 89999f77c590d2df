"""Verifier: does a semantic candidate really ask the same thing? Cheap, deterministic checks.

Cosine on MiniLM puts "Is X included?" and "Is X excluded?" side by side, so a candidate above
the similarity floor still has to agree with the new prompt on:
- numbers (digits and number words, as a multiset: 1066 vs 1666, "two-year" vs "2-year" agree);
- negation (not/no/never/n't/without/... counts) and antonym pairs (included/excluded, ...);
- named entities (capitalised or mixed-case words, acronyms) as a set, and their order;
- novel content words: when either side has content words the other lacks, the candidate needs
  the stricter `novel_floor` similarity (scope changes: "students" vs "nonprofits").
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+(?:[.,]\d+)*")
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
} | {
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "hundred": "100",
    "thousand": "1000",
    "million": "1000000",
    "first": "1",
    "second": "2",
    "third": "3",
    "single": "1",
    "double": "2",
    "twice": "2",
    "half": "0.5",
    "dozen": "12",
}
_NEGATIONS = {"not", "no", "never", "without", "none", "nobody", "nothing", "neither", "nor", "cannot", "non"}
_ANTONYMS = [
    ("include", "exclude"),
    ("included", "excluded"),
    ("allow", "forbid"),
    ("allowed", "forbidden"),
    ("before", "after"),
    ("above", "below"),
    ("more", "less"),
    ("most", "least"),
    ("increase", "decrease"),
    ("add", "remove"),
    ("enable", "disable"),
    ("open", "close"),
    ("start", "stop"),
    ("buy", "sell"),
    ("accept", "reject"),
    ("maximum", "minimum"),
    ("max", "min"),
    ("cheapest", "dearest"),
    ("cheapest", "expensive"),
    ("earliest", "latest"),
    ("in", "out"),
    ("on", "off"),
    ("up", "down"),
    ("import", "export"),
    ("incoming", "outgoing"),
    ("inbound", "outbound"),
    ("upload", "download"),
    ("refund", "charge"),
    ("safe", "unsafe"),
    ("legal", "illegal"),
    ("possible", "impossible"),
    ("available", "unavailable"),
    ("subscribe", "unsubscribe"),
    ("lock", "unlock"),
    ("block", "unblock"),
    ("encrypt", "decrypt"),
    ("join", "leave"),
    ("hot", "cold"),
    ("male", "female"),
    ("men", "women"),
    ("adult", "child"),
    ("domestic", "international"),
    ("weekday", "weekend"),
    ("morning", "evening"),
    ("north", "south"),
    ("east", "west"),
]
_STOP = set(
    """a an the and or but if then of to in on at by for with from as is are was were be been being am do does
    did doing have has had having i me my mine we us our you your yours he him his she her it its they them
    their this that these those there here what which who whom whose when where why how can could should would
    will shall may might must please tell me know want need get got any some much many s t just also so about
    into over than too very way like best good really ok okay hi hello thanks thank""".split()
)


def _words(text: str) -> list[str]:
    out = []
    for w in _WORD.findall(text.replace("’", "'")):
        if w.lower().endswith("n't"):
            out += [w[:-3], "not"]
        else:
            out += [p for p in w.split("-") if p]
    return out


def _stem(w: str) -> str:
    w = w.lower().strip("'")
    for suf in ("ing", "ies", "ied", "es", "ed", "s"):
        if len(w) > len(suf) + 2 and w.endswith(suf):
            return w[: -len(suf)]
    return w


def numbers(text: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for w in _words(text):
        lw = w.lower()
        if lw[0].isdigit():
            out[lw.replace(",", "")] += 1
        elif lw in _NUMBER_WORDS:
            out[_NUMBER_WORDS[lw]] += 1
    return out


def negations(text: str) -> int:
    return sum(1 for w in _words(text) if w.lower() in _NEGATIONS or w.lower().startswith("un-"))


def entities(text: str) -> list[str]:
    """Capitalised words not starting a sentence, mixed-case words and acronyms, in order."""
    out: list[str] = []
    start = True
    for tok in re.findall(r"[A-Za-z][A-Za-z0-9'\-]*|[.!?]", text):
        if tok in ".!?":
            start = True
            continue
        caps = tok[0].isupper() and not start
        mixed = any(c.isupper() for c in tok[1:])
        if (caps or mixed) and tok.lower() not in _STOP and tok != "I":
            out.append(tok.lower())
        start = False
    return out


def content(text: str) -> set[str]:
    return {
        _stem(w)
        for w in _words(text)
        if w.lower() not in _STOP and w.lower() not in _NEGATIONS and not w[0].isdigit() and len(w) > 1
    }


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class Verifier:
    novel_floor: float = 0.90  # similarity needed when content words differ
    enabled: bool = True

    def check(self, new: str, old: str, similarity: float) -> Verdict:
        if not self.enabled or new.strip().lower() == old.strip().lower():
            return Verdict(True)
        if numbers(new) != numbers(old):
            return Verdict(False, "numbers")
        if negations(new) % 2 != negations(old) % 2:
            return Verdict(False, "negation")
        wn, wo = {w.lower() for w in _words(new)}, {w.lower() for w in _words(old)}
        for x, y in _ANTONYMS:
            if (x in wn and y in wo and y not in wn) or (y in wn and x in wo and x not in wn):
                return Verdict(False, f"antonym:{x}/{y}")
        en, eo = entities(new), entities(old)
        if set(en) != set(eo):
            return Verdict(False, "entities")
        if _dedupe(en) != _dedupe(eo):
            return Verdict(False, "order")
        if content(new) != content(old) and similarity < self.novel_floor:
            return Verdict(False, "novel_words")
        return Verdict(True)


def _dedupe(xs: list[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in xs if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]
