"""Who does what to whom: the verifier's check that the same words fill the same roles.

"Subtract 17 from 45" and "Subtract 45 from 17", "the dragon rescues the knight" and "the knight
rescues the dragon" have the same words, the same numbers and a cosine near 1. What differs is
which word sits in which slot of the relation. Without a parser, two signs of that:

- a swap around the same link: two words of both texts appear in the opposite order with the same
  words between them (stop words and articles aside): "mile longer than kilometre" / "kilometre
  longer than mile", "17 from 45" / "45 from 17", "Alice's salary is higher than Bob's" / "Bob's
  salary is higher than Alice's". A paraphrase that reorders moves a phrase and changes what lies
  between ("my Amazon order" / "an order on Amazon"), so its links differ;
- an exchange of markers: each word takes the preposition before its phrase (from, to, than, of,
  by, ...; none for a subject or object), and two words trade them: "from Paris to Rome" / "to
  Paris from Rome", "from 17 subtract 45" / "subtract 17 from 45".

Symmetric relations are let through: a link made of and/or/commas/plus/times/+/=/vs ("A and B",
"between A and B", "37+58"), "equal to", "same as", "as tall as", and with/to/and after compare,
mix, combine, ... . A "vs" in a text that asks how much more (a comparative without which/who) is
not symmetric. Passive clauses are read as active first (clauses.py: "the knight is rescued by the
dragon" is "the dragon rescued the knight"), so the voice may change and the roles may not. Quantified units
are left to units.py ("how many cm in 5 feet" / "5 feet in cm").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .clauses import Tok, cached_tokens
from .lexicon import WordNet
from .words import stem_of

_OP_WORDS = {
    stem_of(w) for w in "minus subtract subtracted divide divided over mod modulo power root".split()
}
# Words that make "X with/to/and/from Y" symmetric when they come before X (stems; "far" and a
# few other words as written: "fare" is not "far").
_SYM_VERBS = {
    stem_of(w)
    for w in """compare compared comparison contrast mix combine merge connect link pair match swap
    exchange distinguish difference differences differ distance correlation relationship
    similarity""".split()
}
_SYM_WORDS = {"far", "between", "both"}
_SYM_LINKS = [
    tuple(stem_of(w) for w in p.split())
    for p in """equal to|same as|similar to|different from|differ from|equivalent to|married to|next to
    |near|beside|equal|meet|meets|marry|identical to|compatible with""".split("|")
]


def _markers(toks: Sequence[Tok]) -> list[str | None]:
    """Each token's marker: the preposition before its phrase (None: subject, object, verb)."""
    out: list[str | None] = []
    cur: str | None = None
    for t in toks:
        if t.kind == "marker":
            cur = t.key
        elif t.kind not in ("item", "det", "conn", "poss") or t.key == ",":
            cur = None  # a comma may end the phrase: "From 17, subtract 45"
        out.append(cur)
    return out


def _items(toks: Sequence[Tok]) -> dict[tuple[str, int], int]:
    """(key, occurrence) -> token index, for the items of a text."""
    seen: Counter[str] = Counter()
    out = {}
    for i, t in enumerate(toks):
        if t.kind == "item":
            out[(t.key, seen[t.key])] = i
            seen[t.key] += 1
    return out


def _link(toks: Sequence[Tok], i: int, j: int) -> list[Tok]:
    """The words between items i and j, articles and stop words aside, and the rest of either
    one's name too ("Apple [Pay] accepts Tesco" links Apple to Tesco by "accepts")."""
    link = [t for t in toks[i + 1 : j] if t.kind not in ("det", "stop")]
    if toks[i].cap:
        while link and link[0].cap and link[0].kind == "item":
            link.pop(0)
    if toks[j].cap:
        while link and link[-1].cap and link[-1].kind == "item":
            link.pop()
    return link


class Roles:
    """Compares the roles of two texts' shared words; built once per verifier (holds the lexicon)."""

    def __init__(self, lexicon: WordNet | None = None) -> None:
        self.lexicon = lexicon

    def swapped(self, new: str, old: str) -> str:
        """The two words whose roles the texts exchange ("17/45"), or "" when none do. Names
        (written as names in either text) may change order only where each keeps its preposition
        ("to Rome from Paris"), or where they are joined symmetrically."""
        a, b = cached_tokens(new, self.lexicon), cached_tokens(old, self.lexicon)
        ia, ib = _items(a), _items(b)
        common = [k for k in ia if k in ib]
        if len(common) < 2:
            return ""
        owner = _owner_changed(a, b, ia, ib)
        if owner:
            return owner
        ma, mb = _markers(a), _markers(b)
        named = {t.key for t in (*a, *b) if t.name}
        swaps: list[tuple[str, int, int]] = []
        symmetric: list[tuple[int, int]] = []  # spans in `a` of pairs swapped around a symmetric link
        for n, x in enumerate(common):
            for y in common[n + 1 :]:
                pa, pb = (ia[x], ia[y]), (ib[x], ib[y])
                kind = self._pair(a, b, ma, mb, pa, pb, {x[0], y[0]} <= named)
                if kind == "symmetric":
                    symmetric.append((min(pa), max(pa)))
                elif kind:
                    swaps.append((f"{x[0][2:]}/{y[0][2:]}", min(pa), max(pa)))
        for name, a1, a2 in swaps:
            # "Is Alice as tall as Bob" / "Is Bob as tall as Alice": tall/Bob moved with the symmetric swap.
            if not any((a1 in s and s[0] < a2 < s[1]) or (a2 in s and s[0] < a1 < s[1]) for s in symmetric):
                return name
        return ""

    def _pair(
        self,
        a: Sequence[Tok],
        b: Sequence[Tok],
        ma: list[str | None],
        mb: list[str | None],
        pa: tuple[int, int],
        pb: tuple[int, int],
        named: bool,
    ) -> str:
        """How one shared pair (x, y at `pa` in a, `pb` in b) differs: "" (not in a way that
        matters), "symmetric" (swapped around and/or/vs/...), or why it is a swap."""
        (xa, ya), (xb, yb) = pa, pb
        inverted = (xa < ya) != (xb < yb)
        exchanged = _exchanged(ma[xa], ma[ya], mb[xb], mb[yb])
        if not inverted and not exchanged:
            return ""
        (a1, a2), (b1, b2) = sorted(pa), sorted(pb)
        la, lb = _link(a, a1, a2), _link(b, b1, b2)
        ha, hb = _without_premodifiers(a, la, a2), _without_premodifiers(b, lb, b2)
        same = inverted and (self._same_words(la, lb) or bool(ha) and self._same_words(ha, hb))
        moved = (
            inverted
            and named
            and (ma[xa], ma[ya]) != (mb[xb], mb[yb])
            and not _compound(la, lb, a2 - a1, b2 - b1)
        )
        if not (same or exchanged or moved):
            return ""
        if _symmetric(la, a, a1, self.lexicon) or _symmetric(lb, b, b1, self.lexicon):
            return "symmetric" if same else ""
        if (
            same
            and _how_many(a, a1) == _how_many(b, b1)
            and (la or _bare_same(a[a1 + 1 : a2], b[b1 + 1 : b2]))
        ):
            return "same link"  # the same words between them, the other way round
        ends = ((a, xa), (a, ya), (b, xb), (b, yb))
        if exchanged and not any(_quantified(t, i) or _how_many(t, i) for t, i in ends):
            return "exchanged"  # each took the other's preposition
        return "moved" if moved else ""  # names reordered, prepositions not carried along

    def _same_words(self, la: Sequence[Tok], lb: Sequence[Tok]) -> bool:
        return len(la) == len(lb) and all(self._same(x, y) for x, y in zip(la, lb, strict=True))

    def _same(self, x: Tok, y: Tok) -> bool:
        if x.key == y.key:
            return True
        return (
            self.lexicon is not None
            and x.key.startswith("w:")
            and y.key.startswith("w:")
            and self.lexicon.related(x.word, y.word)
        )


def _owner_changed(
    a: Sequence[Tok], b: Sequence[Tok], ia: dict[tuple[str, int], int], ib: dict[tuple[str, int], int]
) -> str:
    """Both texts name an owner of the same thing, each a different one of their shared words:
    "Alice's salary ... Bob's" / "Bob's salary ... Alice's", "the mother of Bob" / "Alice's mother"."""
    ka, kb = {i: k for k, i in ia.items()}, {i: k for k, i in ib.items()}
    oa = {ka[y]: ka[x] for y, x in _owners(a).items()}
    ob = {kb[y]: kb[x] for y, x in _owners(b).items()}
    for thing, owner in oa.items():
        other = ob.get(thing)
        if other is not None and other != owner and owner in ib and other in ia:
            return f"{owner[0][2:]}/{other[0][2:]}"
    return ""


def _owners(toks: Sequence[Tok]) -> dict[int, int]:
    """Possessed item index -> owner item index: "X's Y" and "Y of X" (the last word of each phrase)."""
    out = {}
    for i, t in enumerate(toks):
        if i == 0 or toks[i - 1].kind != "item" or i + 1 >= len(toks):
            continue
        if t.kind == "poss" or t.key == "of":
            j = i + 1
            while j < len(toks) and toks[j].kind == "det":
                j += 1
            end = j
            while end < len(toks) and toks[end].kind == "item":
                end += 1
            coordinated = (end < len(toks) and toks[end].kind == "conn") or (
                i > 1 and toks[i - 2].kind == "conn"
            )
            if end > j and not coordinated:  # "the sum of 17 and 86" names no one owner
                if t.kind == "poss":
                    out[end - 1] = i - 1
                else:
                    out[i - 1] = end - 1
    return out


def _without_premodifiers(toks: Sequence[Tok], link: list[Tok], j: int) -> list[Tok]:
    """The link less the words right before item j that modify it: "a credit card pays off a
    [personal] loan" / "a personal loan pays off a [credit] card" link card and loan alike."""
    n = 0
    while j - n - 1 >= 0 and toks[j - n - 1].kind == "item" and n < len(link):
        n += 1
    return link[: len(link) - n]


def _compound(la: Sequence[Tok], lb: Sequence[Tok], gap_a: int, gap_b: int) -> bool:
    """A noun compound in one text, a preposition in the other: "the Leeds Tesco" / "the Tesco in
    Leeds", "my Amazon order" / "an order on Amazon"."""
    return any(
        gap == 1 and len(other) == 1 and other[0].key in ("in", "on", "at", "of", "from", "for")
        for gap, other in ((gap_a, lb), (gap_b, la))
    )


def _bare_same(ra: Sequence[Tok], rb: Sequence[Tok]) -> bool:
    """Between two words with no content word between them: the same small words, and some
    ("Is the teacher a nurse" / "Is the nurse a teacher"). "password reset" / "reset my password"
    and "ordered a jacket" / "a jacket I ordered" are not swaps."""
    return bool(ra) and [t.kind if t.kind == "det" else t.key for t in ra] == [
        t.kind if t.kind == "det" else t.key for t in rb
    ]


def _exchanged(xa: str | None, ya: str | None, xb: str | None, yb: str | None) -> bool:
    """x and y trade markers between the texts: (from, to) -> (to, from), (None, from) -> (from, None)."""
    return xa != ya and xa == yb and ya == xb and not {xa, ya} <= {None, "as", "like"}


def _quantified(toks: Sequence[Tok], i: int) -> bool:
    """A unit with a number before it: units.py binds those."""
    return toks[i].key.startswith("u:") and i > 0 and toks[i - 1].key.startswith("n:")


def _how_many(toks: Sequence[Tok], i: int) -> bool:
    j = i - 1
    while j >= 0 and toks[j].kind == "det":
        j -= 1
    return j >= 0 and toks[j].word in ("many", "much")


def _symmetric(link: Sequence[Tok], toks: Sequence[Tok], first: int, lexicon: WordNet | None) -> bool:
    """A link that makes no order: and/or/commas/plus/+/=/vs with the pair's own words about it
    ("baking soda and baking powder", "37+58"), a symmetric phrase (equal to, same as, as tall
    as), or with/to/and/from after compare, mix, difference, between, how far, ..."""
    keys = tuple(t.key[2:] if t.kind == "item" else t.key for t in link)
    if any(t.kind == "conn" for t in link) and all(
        t.kind == "conn" or (t.kind == "item" and t.key[2:] not in _OP_WORDS) for t in link
    ):
        if not ("vs" in keys and _asks_how_much_more(toks, lexicon)):
            return True
    while link and link[-1].kind == "item":  # the second word's own modifiers: "same as [5] GB"
        link, keys = link[:-1], keys[:-1]
    while link and link[0].key.startswith("n:"):  # the first word's number: "Python [3] with"
        link, keys = link[1:], keys[1:]
    if keys in _SYM_LINKS or (len(keys) == 3 and keys[0] == keys[2] == "as"):
        return True
    if keys in (("with",), ("to",), ("and",), ("from",), ("vs",)):
        before = {t.key[2:] for t in toks[:first] if t.kind == "item"}
        words = {t.word for t in toks[:first]}
        return bool(before & _SYM_VERBS or words & _SYM_WORDS) or (
            keys == ("vs",) and not _asks_how_much_more(toks, lexicon)
        )
    return False


def _asks_how_much_more(toks: Sequence[Tok], lexicon: WordNet | None) -> bool:
    """A comparative and no which/who: "how much faster is X vs Y" has an order, "which is faster,
    X vs Y" has none."""
    words = {t.word for t in toks}
    if words & {"which", "who", "whichever"}:
        return False
    if words & {"more", "less", "fewer", "better", "worse", "than"}:
        return True
    return any(w.endswith("er") and _comparative(w, lexicon) for w in words)


def _comparative(w: str, lexicon: WordNet | None) -> bool:
    """faster, bigger, heavier: an adjective's -er form (WordNet's morphy finds the adjective)."""
    if lexicon is None:
        return w in {"faster", "slower", "bigger", "smaller", "cheaper", "higher", "lower", "longer"}
    return bool(lexicon.lemmas(w, "a") - {w})
