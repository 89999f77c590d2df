"""Clauses as typed tokens for the role check (structure.py): words, numbers and units as items,
prepositions as markers, and/or/plus as connectors, articles, stop words; passives turned active.

"The knight is rescued by the dragon" is read as "the dragon rescued the knight" (also "was the
knight rescued by the dragon" and the reduced "a knight rescued by a dragon"), so a change of voice
is not a change of roles. Arithmetic participles stay ("10 divided by 2" keeps its order), and
"by" before a number is a measure, not an agent ("increased by 5%").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .lexicon import WordNet
from .units import mentions
from .words import CONTRACTION, NEGATIONS, NUMBER_WORDS, STOP_WORDS, stem_of

_MARKERS = {m: m for m in "from to than by of for with in on at before after over under per via".split()}
_MARKERS |= {m: m for m in "against as between among about across through behind above below".split()}
_MARKERS |= {m: m for m in "beside near inside outside around until since during within like then".split()}
_MARKERS |= {"into": "to", "onto": "on", "towards": "to", "toward": "to", "till": "until"}
_MARKERS |= {"versus": "vs", "vs": "vs", "vs.": "vs"}
_CONN = {"and", "or", "nor", ",", "&", "+", "plus", "times", "*", "×", "=", "equals", "vs"}
_DET = set(
    "a an the my your our their his her its this that these those some any each every all both".split()
)
_OPS = {"-", "/", "÷", "^", "<", ">", "%"}
_PRONOUNS = {"i": "I", "me": "I", "we": "we", "us": "we", "he": "he", "him": "he", "she": "she"}
_PRONOUNS |= {"they": "they", "them": "they"}
_AUX = {"is", "are", "was", "were", "be", "been", "being", "am", "get", "gets", "got", "gotten", "getting"}
_NO_PASSIVE = {
    stem_of(w) for w in "divided multiplied subtracted added raised rounded increased decreased".split()
}
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[A-Za-z][A-Za-z\-]*(?:'[A-Za-z]+)?|vs\.|[^\sA-Za-z\d]")


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str  # item, marker, conn, det, stop, neg, poss, punct, op
    key: str  # items: "w:stem", "n:17", "u:km"; others: the word
    word: str = ""
    name: bool = False  # written as a name: capitalised inside a sentence, mixed case, acronym
    cap: bool = False  # capitalised anywhere: the rest of a name ("Apple Pay accepts ...")


def tokens(text: str, lexicon: WordNet | None = None) -> list[Tok]:
    """The text as typed tokens, units as single items, passives turned active."""
    text = text.replace("’", "'")
    units: dict[int, list[str]] = {}
    ends: dict[int, int] = {}
    for u in mentions(text):
        units.setdefault(u.start, []).append(u.key)
        ends[u.start] = u.end
    out: list[Tok] = []
    skip_to = -1
    start = True  # at a sentence's start, a capital says nothing of a name
    for m in _TOKEN.finditer(text):
        if m.start() < skip_to:
            continue
        if m.start() in units:
            out.append(Tok("item", "u:" + "+".join(units[m.start()])))
            skip_to = ends[m.start()]
        else:
            out += _word_tokens(m.group(), lexicon, start)
        start = m.group() in (".", "!", "?")
    return _active(out, lexicon)


@lru_cache(maxsize=4096)
def cached_tokens(text: str, lexicon: WordNet | None) -> tuple[Tok, ...]:
    """tokens(), kept: a prompt meets several candidates, and a stored prompt many prompts."""
    return tuple(tokens(text, lexicon))


def _word_tokens(raw: str, lexicon: WordNet | None, start: bool = False) -> list[Tok]:
    """One word as tokens (a hyphenated word as its parts, "n't" as "not", "'s" of a noun as
    a possessive), items marked where written as a name."""
    low = raw.lower()
    if raw[0].isdigit():
        return [Tok("item", "n:" + raw.replace(",", ""))]
    if not raw[0].isalpha():
        if raw in _CONN:
            return [Tok("conn", raw)]
        return [Tok("op" if raw in _OPS else "punct", raw)]
    if len(raw) > 1 and raw.isupper() and raw.isalpha():
        return [Tok("item", "w:" + low, low, True, True)]  # an acronym: US is not "us", IT not "it"
    tail: list[Tok] = []
    if low.endswith("n't"):
        low, tail = low[:-3], [Tok("neg", "not")]
    elif CONTRACTION.search(low):
        base = CONTRACTION.sub("", low)
        if low.endswith("'s") and base not in STOP_WORDS:
            tail = [Tok("poss", "'s")]
        low = base
    out: list[Tok] = []
    for n, part in enumerate(p for p in raw[: len(low)].split("-") if p):
        t = _word(part.lower(), lexicon)
        if t.kind == "item" and part.lower() != part:
            name = part[0].isupper() and not (start and n == 0) or any(c.isupper() for c in part[1:])
            t = Tok("item", t.key, t.word, name, True)
        out.append(t)
    return out + tail


def _word(w: str, lexicon: WordNet | None) -> Tok:
    if w in _PRONOUNS:  # "my flatmate owes me" / "I owe my flatmate": a person in a role
        return Tok("item", "w:" + _PRONOUNS[w], w)
    if w in _MARKERS:
        return Tok("marker", _MARKERS[w], w)
    if w in _CONN:
        return Tok("conn", w, w)
    if w in _DET:
        return Tok("det", w, w)
    if w in NEGATIONS:
        return Tok("neg", "not", w)
    if w in NUMBER_WORDS:
        return Tok("item", "n:" + NUMBER_WORDS[w], w)
    if w in STOP_WORDS or len(w) < 2:
        return Tok("stop", w, w)
    return Tok("item", "w:" + _stem(w, lexicon), w)


def _stem(w: str, lexicon: WordNet | None) -> str:
    """The stem, with irregular verb forms on their base (wrote, written -> write)."""
    if lexicon is not None:
        base = lexicon.exc["v"].get(w)
        if base:
            w = base[0]
    return stem_of(w)


def _participle(tok: Tok, lexicon: WordNet | None) -> bool:
    w = tok.word
    if tok.kind != "item" or not w or tok.key[2:] in _NO_PASSIVE:
        return False
    if w.endswith("ed"):
        return True
    return lexicon is not None and w in lexicon.exc["v"] and w.endswith(("en", "wn", "ne", "t", "ght"))


def _active(toks: list[Tok], lexicon: WordNet | None) -> list[Tok]:
    """'P is <verb>ed by A' -> 'A <verb>ed P' (also 'was P <verb>ed by A' and 'a P <verb>ed by A')."""
    for k in range(2, len(toks) - 1):
        if toks[k].key != "by" or not _participle(toks[k - 1], lexicon):
            continue
        a_end = _np_end(toks, k + 1)
        if a_end == k + 1 and toks[k + 1].word in ("whom", "who", "what", "which"):
            a_end += 1  # written by whom
        if a_end == k + 1 or toks[k + 1].key.startswith(("n:", "u:")):
            continue  # nothing after by, or a measure (increased by 5%)
        v = k - 1
        aux = next((i for i in range(v - 1, max(v - 6, -1), -1) if toks[i].word in _AUX), None)
        if aux == v - 1:  # P is rescued by A
            cut = p_start = _np_start(toks, v - 1, 3)
            p_end = v - 1
        elif aux is not None and all(t.kind in ("item", "det", "poss") for t in toks[aux + 1 : v]):
            cut, p_start, p_end = aux, aux + 1, v  # was P rescued by A
        else:
            cut = p_start = _np_start(toks, v, 1)  # a P rescued by A
            p_end = v
        if p_start == p_end:
            continue
        return (
            toks[:cut]
            + toks[k + 1 : a_end]
            + [toks[v]]
            + toks[p_start:p_end]
            + _active(toks[a_end:], lexicon)
        )
    return toks


def _np_end(toks: list[Tok], i: int) -> int:
    while i < len(toks) and toks[i].kind in ("item", "det", "poss"):
        i += 1
    return i


def _np_start(toks: list[Tok], end: int, max_items: int) -> int:
    i, items = end, 0
    while i > 0 and toks[i - 1].kind in ("item", "det", "poss") and items < max_items:
        items += toks[i - 1].kind == "item"
        i -= 1
    return i
