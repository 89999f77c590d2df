"""Features of a (new prompt, cached prompt) pair for the learned pair model (pairmodel.py).

The verifier's checks are all-or-nothing rules; what slips past them are near misses whose words
mostly agree: "How long should I cook a brisket?" / "What temperature should I cook a brisket
at?", "this weekend" / "next weekend", the same words in another order. These features describe
how the two texts' content words align, so a small model can weigh many weak signs together:

- overlap: content words (stems) aligned exactly, by a one-letter slip, or as WordNet synonyms
  (lexicon.py); coverage of each side, Dice overlap, unaligned words per side (names apart),
  numbers, units (units.py) and time words (next/tomorrow/weekend) on one side only, typos;
- order: Kendall tau and discordant pairs of the aligned clause items (clauses.py: words,
  numbers, units; passives read as active), counting only swaps with the same prepositions
  between (a role swap keeps the words and reverses their order);
- shape: length ratio, character similarity, how many places the word sequences differ and the
  largest differing span, a pure addition of words, the sum of the differences above;
- question: the question head (what / how long / when / yes-no ...) on each side and the kind of
  answer it asks for (a duration, a temperature, a place ...), negation counts;
- the MiniLM cosine the cache already computed.

Deterministic, pure Python over the verifier's own vocabulary (words.py, clauses.py, units.py);
0.15-0.3 ms a pair on a busy two-core host, each text's part kept for the next pair (_side).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from .clauses import cached_tokens
from .lexicon import WordNet
from .units import mentions
from .verify import _base, _one_slip, entities, negations, numbers
from .words import NEGATIONS, NUMBER_WORDS, STOP_WORDS, split_words, stem_of, strip_pleasantries

FEATURES: tuple[str, ...] = (
    "cosine",
    "dice",
    "cover_new",
    "cover_old",
    "unaligned_new",
    "unaligned_old",
    "unaligned_caps",
    "number_diff",
    "unit_diff",
    "time_diff",
    "slips",
    "kendall_tau",
    "discordant",
    "replaced",
    "len_ratio",
    "negation_diff",
    "negation_any",
    "head_differs",
    "answer_differs",
    "answer_conflict",
    "char_ratio",
    "word_edits",
    "largest_edit",
    "pure_addition",
    "differences",
)

# Words that place a question in time: one side having them and the other not is a changed date.
_TIME_WORDS = set(
    """today tonight tomorrow yesterday now currently current this next last previous coming past
    upcoming ago before after day days week weeks weekend weekends month months year years night
    morning afternoon evening noon midnight season spring summer autumn fall winter monday tuesday
    wednesday thursday friday saturday sunday january february march april may june july august
    september october november december christmas easter holiday holidays early late later soon
    recent recently daily weekly monthly yearly annual annually hourly""".split()
)
# Fillers the verifier's pleasantries do not strip ("... on time pls", "Thanks a lot!").
# "ca"/"wo"/"sha": what is left of can't / won't / shan't once n't is split off.
_FILLERS = set("pls plz thx ty lot lots cheers asap quick silly question sorry ca wo sha".split())
# A greeting with a name before the question ("Hi team, ...", "Hello Sam: ..."); words.py strips
# only the bare ones.
_HELLO = re.compile(r"^\s*(?:hi|hello|hey|hiya|dear)\b[^,!.?:;]{0,25}[,!.:;]\s*", re.IGNORECASE)
# A relation that reads the same both ways: a swap of its terms is no change of roles.
_SYM_WORDS = {
    stem_of(w)
    for w in """far distance difference differences differ compare compared comparison versus vs between
    sum both same similar similarity equal mix combine together""".split()
}
_WH = {"what", "how", "when", "where", "who", "whom", "whose", "why", "which"}
_HOW_WHAT = {"many", "much", "long", "often", "far", "old", "big", "tall", "fast", "soon", "late", "early"}
# What kind of answer a question wants, from its head ("how long": a duration, "what temperature":
# a temperature): "how long should I cook it" and "what temperature should I cook it at" share
# every other word. Read off the wh-word, or the first word after how / what / which.
_ANSWER = {
    w: kind
    for kind, words in {
        "time": "when time day date year month hour deadline",
        "duration": "long duration",
        "amount": "much cost costs price fee fees charge expensive cheap",
        "count": "many number",
        "frequency": "often frequency schedule",
        "temperature": "temperature hot warm cold",
        "distance": "far distance",
        "size": "big size tall height weight heavy",
        "age": "old age",
        "speed": "fast speed quickly",
        "place": "where location",
        "person": "who whom whose",
        "reason": "why",
    }.items()
    for w in words.split()
}
# Answers any specific one may be asked as ("how many" counts days, times, anything).
_GENERIC = {"", "yn", "thing", "manner", "count"}
_SAME_ANSWER = {"duration": "time"}  # "when will it arrive" / "how long does it take"
_UNITS_OF_TIME = {"seconds", "minutes", "hours", "days", "weeks", "months", "years"}
_YES_NO = set("is are was were can could do does did should would will shall may might must have has".split())


@dataclass(frozen=True, slots=True)
class _Side:
    """One text's content words in order (stem, word as written) and its plain tokens."""

    content: tuple[tuple[str, str], ...]
    tokens: tuple[str, ...]
    caps: frozenset[str]
    units: Counter[str]
    items: tuple[tuple[str, str], ...]  # clauses.py's items (key, word), passives made active
    at: tuple[int, ...]  # each item's index among the clause tokens
    marks: tuple[str, ...]  # each clause token's preposition (from/to/for/...), "&" a connector, "" else
    symmetric: bool  # a relation that reads the same both ways (how far, the difference between)


@lru_cache(maxsize=8192)
def _side(text: str, lexicon: WordNet | None) -> _Side:
    """One text's words, items and marks; kept: a stored prompt meets many new ones."""
    text = strip_pleasantries(text)
    text = _HELLO.sub("", text, count=1) or text
    words = split_words(text)
    seen: dict[str, str] = {}
    for w in words:
        b = _base(w)
        if b in STOP_WORDS or b in _FILLERS or w.lower() in NEGATIONS or w.lower() in NUMBER_WORDS:
            continue
        if w[0].isdigit() or len(w) < 2:
            continue
        seen.setdefault(stem_of(w), b)
    items: list[tuple[str, str]] = []
    at: list[int] = []
    toks = cached_tokens(text, lexicon)
    for k, t in enumerate(toks):
        if t.kind == "item" and t.word not in _FILLERS:
            items.append((t.key, t.word))
            at.append(k)
    marks = tuple("&" if t.kind == "conn" else t.key if t.kind == "marker" else "" for t in toks)
    return _Side(
        content=tuple(seen.items()),
        tokens=tuple(w.lower() for w in words),
        caps=frozenset(stem_of(e) for e in entities(text)),
        units=Counter(m.key for m in mentions(text)),
        items=tuple(items),
        at=tuple(at),
        marks=marks,
        symmetric=any(stem_of(w) in _SYM_WORDS for w in words),
    )


def _align(new: _Side, old: _Side, lexicon: WordNet | None) -> tuple[list[tuple[int, int]], int]:
    """Content words aligned across the texts: (new index, old index) pairs by the same stem, then
    by a one-letter slip or as synonyms (each old word used once); also how many pairs are slips."""
    pairs: list[tuple[int, int]] = []
    old_at = {s: j for j, (s, _) in enumerate(old.content)}
    rest = []
    for i, (s, _) in enumerate(new.content):
        if s in old_at:
            pairs.append((i, old_at.pop(s)))
        else:
            rest.append(i)
    free = sorted(old_at.values())
    slips = 0
    for i in rest:
        s, w = new.content[i]
        for j in free:
            t, v = old.content[j]
            slip = _one_slip(s, t) or _one_slip(w, v)
            if slip or (lexicon is not None and lexicon.related(w, v)):
                pairs.append((i, j))
                free.remove(j)
                slips += slip
                break
    return sorted(pairs), slips


def _typo(w: str, other: _Side) -> bool:
    """A one-letter slip of any word the other text has, a stop word included ("shold" / "should")."""
    return any(_one_slip(w, t) for t in other.tokens)


def _head(tokens: tuple[str, ...]) -> str:
    """The question's head: its first wh-word ("how long" with its measure), else yes/no."""
    tokens = tuple(_base(t) for t in tokens)
    for k, t in enumerate(tokens):
        if t in _WH:
            nxt = tokens[k + 1] if k + 1 < len(tokens) else ""
            return f"{t} {nxt}" if t == "how" and nxt in _HOW_WHAT else t
    return "yn" if tokens and tokens[0] in _YES_NO else ""


def _answer(tokens: tuple[str, ...]) -> str:
    """The kind of answer asked for (_ANSWER), "manner" for a bare how, "thing" for a what / which
    without a kind word, "yn" for a yes/no question, "" when there is no question word."""
    tokens = tuple(_base(t) for t in tokens)  # what's -> what
    for k, t in enumerate(tokens):
        if t in ("when", "where", "who", "whom", "whose", "why"):
            return _ANSWER[t]
        if t in ("how", "what", "which"):
            after = [w for w in tokens[k + 1 : k + 5] if w not in STOP_WORDS or w in _ANSWER][:2]
            if t == "how" and after[:1] == ["many"] and after[1:] and after[1] in _UNITS_OF_TIME:
                return "duration"  # how many days does it take
            if t == "how":
                return _ANSWER.get(tokens[k + 1] if k + 1 < len(tokens) else "", "manner")
            return _ANSWER.get(after[0], "thing") if after else "thing"  # what temperature / the journey time
    return "yn" if tokens and tokens[0] in _YES_NO else ""


def _item_pairs(new: _Side, old: _Side, lexicon: WordNet | None) -> list[tuple[int, int]]:
    """(new index, old index) of aligned clause items (words, numbers, units), in new order:
    the same key first, then a one-letter slip or synonym; each old item used once."""
    pairs: list[tuple[int, int]] = []
    free = set(range(len(old.items)))
    rest = []
    for i, (key, _) in enumerate(new.items):
        j = next((j for j in sorted(free) if old.items[j][0] == key), None)
        if j is None:
            rest.append(i)
        else:
            pairs.append((i, j))
            free.discard(j)
    for i in rest:
        key, w = new.items[i]
        for j in sorted(free):
            k2, v = old.items[j]
            if key[:2] == k2[:2] == "w:" and (
                _one_slip(w, v) or (lexicon is not None and lexicon.related(w, v))
            ):
                pairs.append((i, j))
                free.discard(j)
                break
    return sorted(pairs)


def _link(side: _Side, x: int, y: int) -> tuple[str, ...]:
    """The prepositions and connectors between items x and y of one text, in order."""
    lo, hi = sorted((side.at[x], side.at[y]))
    return tuple(m for m in side.marks[lo + 1 : hi] if m)


def _order(pairs: list[tuple[int, int]], new: _Side, old: _Side) -> tuple[float, int]:
    """Kendall tau of the aligned items' positions (1.0 with fewer than two) and the discordant
    pairs, both counting only swaps of roles: two items the other way round with the same
    prepositions between them ("from Gmail to Outlook" / "from Outlook to Gmail", "the cat chases
    the dog" / "the dog chases the cat"), none across a connector ("A and B" / "B and A"), none in a
    relation that reads both ways ("how far is A from B"). A phrase moved with its preposition
    ("the password for guests" / "the guest password") is no swap; passives are read as active."""
    n = len(pairs)
    if n < 2 or new.symmetric or old.symmetric:
        return 1.0, 0
    disc = 0
    for x in range(n):
        for y in range(x + 1, n):
            (i1, j1), (i2, j2) = pairs[x], pairs[y]
            if (i1 - i2) * (j1 - j2) >= 0:
                continue
            link = _link(new, i1, i2)
            if "&" not in link and link == _link(old, j1, j2):
                disc += 1
    return 1.0 - 2.0 * disc / (n * (n - 1) // 2), disc


def _time_diff(new: _Side, old: _Side) -> int:
    """Time words on one side only (next/this weekend, tomorrow/day after tomorrow); a typo of a
    word the other side has is not one ("evneing")."""
    tn = Counter(t for t in new.tokens if t in _TIME_WORDS)
    to = Counter(t for t in old.tokens if t in _TIME_WORDS)
    only = [(w, old) for w in (tn - to).elements()] + [(w, new) for w in (to - tn).elements()]
    return sum(1 for w, other in only if not any(_one_slip(w, t) for t in other.tokens))


def _diff(c: Counter[str], d: Counter[str]) -> int:
    return sum(((c - d) + (d - c)).values())


def features(new: str, old: str, cosine: float, lexicon: WordNet | None = None) -> list[float]:
    """The pair's feature vector, in FEATURES order (new: the prompt looked up; old: the cached one)."""
    sn, so = _side(new, lexicon), _side(old, lexicon)
    pairs, slips = _align(sn, so, lexicon)
    n_new, n_old = len(sn.content), len(so.content)
    in_new = {i for i, _ in pairs}
    in_old = {j for _, j in pairs}
    un_new = [s for i, (s, w) in enumerate(sn.content) if i not in in_new and not _typo(w, so)]
    un_old = [s for j, (s, w) in enumerate(so.content) if j not in in_old and not _typo(w, sn)]
    typos = n_new - len(in_new) - len(un_new) + n_old - len(in_old) - len(un_old)
    tau, disc = _order(_item_pairs(sn, so, lexicon), sn, so)
    ops = [
        o
        for o in difflib.SequenceMatcher(None, so.tokens, sn.tokens, autojunk=False).get_opcodes()
        if o[0] != "equal"
    ]
    hn, ho = _head(sn.tokens), _head(so.tokens)
    an, ao = _answer(sn.tokens), _answer(so.tokens)
    neg_new, neg_old = negations(new), negations(old)
    caps_new = sum(1 for s in un_new if s in sn.caps)
    caps_old = sum(1 for s in un_old if s in so.caps)
    f = {
        "cosine": float(cosine),
        "dice": 1.0 - (len(un_new) + len(un_old)) / max(n_new + n_old, 1),
        "cover_new": 1.0 - len(un_new) / n_new if n_new else 1.0,
        "cover_old": 1.0 - len(un_old) / n_old if n_old else 1.0,
        "unaligned_new": float(len(un_new) - caps_new),
        "unaligned_old": float(len(un_old) - caps_old),
        "unaligned_caps": float(caps_new + caps_old),
        "number_diff": float(_diff(numbers(new), numbers(old))),
        "unit_diff": float(_diff(sn.units, so.units)),
        "time_diff": float(_time_diff(sn, so)),
        "slips": float(slips + typos),
        "kendall_tau": tau,
        "discordant": float(min(disc, 6)),
        "replaced": float(bool(un_new) and bool(un_old)),
        "len_ratio": min(len(sn.tokens), len(so.tokens)) / max(len(sn.tokens), len(so.tokens), 1),
        "negation_diff": float(abs(neg_new - neg_old)),
        "negation_any": float(neg_new > 0 or neg_old > 0),
        "head_differs": float(bool(hn) and bool(ho) and hn != ho),
        "answer_differs": float(bool(an) and bool(ao) and an != ao),
        "answer_conflict": float(
            an not in _GENERIC and ao not in _GENERIC and _SAME_ANSWER.get(an, an) != _SAME_ANSWER.get(ao, ao)
        ),
        "char_ratio": difflib.SequenceMatcher(None, old.lower(), new.lower(), autojunk=False).ratio(),
        "word_edits": float(len(ops)),
        "largest_edit": float(min(max((max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in ops), default=0), 8)),
        "pure_addition": float((not un_new) != (not un_old)),
    }
    hard = ("unaligned_new", "unaligned_old", "unaligned_caps", "number_diff", "unit_diff", "time_diff")
    f["differences"] = sum(f[k] for k in hard) + f["discordant"] + f["negation_diff"]
    return [f[k] for k in FEATURES]
