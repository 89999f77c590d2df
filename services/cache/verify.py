"""Verifier: does a semantic candidate really ask the same thing? Cheap, deterministic checks.

Cosine on MiniLM puts "Is X included?" and "Is X excluded?" side by side, so a candidate above
the similarity floor still has to agree with the new prompt on:
- numbers (digits and number words, as a multiset: 1066 vs 1666, "two-year" vs "2-year" agree;
  a time keeps its am/pm: 7am vs 7pm differ; "5 million" is 5 and a magnitude);
- units and magnitudes (services/cache/units.py): the same units in any spelling (km/kilometres,
  MB/megabytes, °C/degrees Celsius, $5/5 USD), with case where a convention gives it meaning
  (Mb megabit, MB megabyte), each number bound to the same unit ("5 km to miles" is not "5 miles
  to km"); megabits vs megabytes, % vs percentage points, 5k vs 5 million differ;
- relative time (services/cache/when.py): tomorrow, next week, last Monday, the day before X must
  agree ("this weekend" / "next weekend"); today, tonight, this week are the default present;
- polarity: negation words (not/no/never/n't/without/...) and negative-polarity verbs
  (avoid/ban/stop/exclude/...) counted together, parity must agree;
- antonymy: a lexicon of opposite pairs compared on stems (open/closed, weekdays/weekends,
  adults/children), and morphological opposites (suitable/unsuitable, successful/unsuccessful:
  one side has a word the other has with a negative prefix);
- named entities (capitalised or mixed-case words, acronyms): each named in the other text;
- roles (services/cache/structure.py): the shared words fill the same slots. Rejected: two words
  the other way round with the same words between ("subtract 17 from 45" / "45 from 17", "the
  dragon rescues the knight" / "the knight rescues the dragon", "Alice's salary is higher than
  Bob's" / the reverse), two words trading prepositions ("from Paris to Rome" / "to Paris from
  Rome"), another owner of the same thing, named entities reordered without their prepositions.
  Let through: symmetric links (and/or/plus/times/vs, between, compare, same as, how far), a
  phrase moved with its preposition ("to Rome from Paris"), and a change of voice (passives are
  read as active);
- novel content words: when either side has content words the other lacks, the candidate needs
  the stricter `novel_floor` similarity (scope changes: "students" vs "nonprofits"); a pure
  addition (one side's content words all in the other, plus more: "gift" vs "gift card") is an
  added constraint and needs `added_floor`;
- synonyms (services/cache/lexicon.py, WordNet 3.0): a slot filled with a synonym, or a verb and
  its direct hypernym, is the same slot (change/switch, start/begin, order/request, set up/create),
  and a content word the other text has as a synonym is not novel.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass, field

from .lexicon import WordNet, wordnet
from .structure import Roles
from .units import units_differ, without_units
from .when import time_differs
from .words import (
    ANTONYM_STEMS,
    CONTRACTION,
    NEG_PREFIXES,
    NEGATIONS,
    NEGATIVE_STEMS,
    NUMBER_WORDS,
    OFF_PREFIX,
    STOP_WORDS,
    split_words,
    stem_of,
    strip_pleasantries,
)

_SCALES = {"thousand", "million", "billion", "trillion"}


def numbers(text: str) -> Counter[str]:
    """Digits and number words; a scale after a number ("5 million") is a magnitude, which
    units.py compares (5 million = 5m)."""
    out: Counter[str] = Counter()
    prev = ""
    for w in split_words(text):
        lw = w.lower().replace(" ", "")
        if lw[0].isdigit():
            out[lw.replace(",", "")] += 1
        elif lw in NUMBER_WORDS and not (lw in _SCALES and (prev[:1].isdigit() or prev in NUMBER_WORDS)):
            out[NUMBER_WORDS[lw]] += 1
        prev = lw
    return out


def negations(text: str) -> int:
    """Negation words and negative-polarity verbs (avoid, ban, stop, ...): only the parity matters."""
    return sum(
        1
        for w in split_words(text)
        if w.lower() in NEGATIONS or w.lower().startswith("un-") or stem_of(w) in NEGATIVE_STEMS
    )


def opposite(new: str, old: str) -> str:
    """An antonym pair across the two texts (lexicon on stems, or a negative prefix); "" = none."""
    sn = {stem_of(w) for w in split_words(new)}
    so = {stem_of(w) for w in split_words(old)}
    for x, y in ANTONYM_STEMS:
        if (x in sn and y in so and y not in sn) or (y in sn and x in so and x not in sn):
            return f"{x}/{y}"
    for a_text, b_text in ((new, old), (old, new)):
        off_a = {m.group(1).lower() for m in OFF_PREFIX.finditer(a_text)}
        off_b = {m.group(1).lower() for m in OFF_PREFIX.finditer(b_text)}
        for w in off_a - off_b:
            if w in {x.lower() for x in split_words(b_text)}:
                return f"{w}/off-{w}"
    wn = {w.lower() for w in split_words(new)}
    wo = {w.lower() for w in split_words(old)}
    for a, b in ((wn - wo, wo - wn), (wo - wn, wn - wo)):
        for w in a:
            for pre in NEG_PREFIXES:
                if w.startswith(pre) and len(w) - len(pre) >= 4 and w[len(pre) :] in b:
                    return f"{w[len(pre) :]}/{w}"
    return ""


def slot_changed(new: str, old: str, lexicon: WordNet | None = None) -> str:
    """The same sentence frame with one slot filled differently ("for a puppy" / "for a kitten",
    "home insurance" / "car insurance"): a different question, whatever the cosine says. Returns
    the changed slot ("puppy/kitten"), or "" when the texts differ in more than one place, or only
    by a typo or an inflection of the same word."""
    # Number words as digits: numbers() has compared those already.
    a = [NUMBER_WORDS.get(w.lower(), w.lower()) for w in split_words(old)]
    b = [NUMBER_WORDS.get(w.lower(), w.lower()) for w in split_words(new)]
    ops = [o for o in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if o[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return ""
    _, i1, i2, j1, j2 = ops[0]
    x = " ".join(w for w in a[i1:i2] if w not in STOP_WORDS)
    y = " ".join(w for w in b[j1:j2] if w not in STOP_WORDS)
    if i2 - i1 > 2 or j2 - j1 > 2 or not x or not y:
        return ""
    if stem_of(x) == stem_of(y) or difflib.SequenceMatcher(None, x, y).ratio() >= 0.8:
        return ""  # a typo or an inflection
    if lexicon is not None and lexicon.related(x, y):
        return ""  # the same slot in other words (change/switch)
    return f"{x}/{y}"


_ENTITY_TOKEN = r"[A-Za-z][A-Za-z0-9'\-]*"


def entities(text: str) -> list[str]:
    """Capitalised words not starting a sentence, mixed-case words and acronyms, in order."""
    out: list[str] = []
    start = True
    for tok in re.findall(_ENTITY_TOKEN + r"|[.!?]", text):
        if tok in ".!?":
            start = True
            continue
        caps = tok[0].isupper() and not start
        mixed = any(c.isupper() for c in tok[1:])
        if (caps or mixed) and _base(tok) not in STOP_WORDS and tok != "I":
            out.append(_base(tok))  # Australia's -> australia
        start = False
    return out


def _base(w: str) -> str:
    return CONTRACTION.sub("", w.lower())


def content(text: str) -> set[str]:
    return set(content_words(text))


def content_words(text: str) -> dict[str, str]:
    """Content words as stem -> the word as written (lower case)."""
    return {
        stem_of(w): _base(w)
        for w in split_words(text)
        if _base(w) not in STOP_WORDS
        and w.lower() not in NEGATIONS
        and w.lower() not in NUMBER_WORDS  # numbers() compares those
        and not w[0].isdigit()
        and len(w) > 1
    }


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class Verifier:
    novel_floor: float = 0.85  # similarity needed when content words differ
    added_floor: float = 0.95  # ... when one side only adds content words (an added constraint)
    enabled: bool = True
    lexicon: WordNet | None = field(default_factory=wordnet, repr=False)  # None: no synonym rules
    roles: Roles = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", Roles(self.lexicon))

    def check(self, new: str, old: str, similarity: float) -> Verdict:
        if not self.enabled or new.strip() == old.strip():
            return Verdict(True)
        new, old = strip_pleasantries(new), strip_pleasantries(old)
        units = units_differ(new, old)
        full_new, full_old = new, old
        new, old = without_units(new), without_units(old)  # compared by units_differ, in any spelling
        if numbers(new) != numbers(old):  # "per second" is no ordinal
            return Verdict(False, "numbers")
        if units:
            return Verdict(False, f"units:{units}")
        when = time_differs(new, old)
        if when:
            return Verdict(False, f"time:{when}")
        if negations(new) % 2 != negations(old) % 2:
            return Verdict(False, "negation")
        opp = opposite(new, old)
        if opp:
            return Verdict(False, f"antonym:{opp}")
        en, eo = [stem_of(e) for e in entities(new)], [stem_of(e) for e in entities(old)]  # Sundays ~ Sunday
        if _entity_missing(en, old) or _entity_missing(eo, new):
            return Verdict(False, "entities")
        if self.roles.swapped(full_new, full_old):
            return Verdict(False, "order")
        slot = slot_changed(new, old, self.lexicon)
        if slot:
            return Verdict(False, f"slot:{slot}")
        words_new, words_old = content_words(new), content_words(old)
        co = set(words_old)
        cn = _spelled_as(set(words_new), co)
        if cn != co and self.lexicon is not None:
            cn = _synonyms_as(words_new, words_old, cn, co, self.lexicon)
        if cn != co:
            if similarity < self.novel_floor:
                return Verdict(False, "novel_words")
            if (cn < co or co < cn) and similarity < self.added_floor:
                return Verdict(False, "added_words")
        return Verdict(True)


def _entity_missing(ents: list[str], other: str) -> bool:
    """An entity of one text that the other never names, in any casing ("UK" vs "the uk" is the same
    entity; "Amazon" vs "eBay" is not)."""
    tokens = split_words(other) + re.findall(_ENTITY_TOKEN, other)  # "Wi-Fi", "P60" whole as well
    words = {stem_of(_base(w)) for w in tokens}
    return any(e not in words and not _typo_of(e, words) for e in ents)


def _typo_of(w: str, among: set[str]) -> bool:
    return any(_one_slip(w, x) for x in among)


def _one_slip(a: str, b: str) -> bool:
    """One letter added, dropped, changed, or two neighbours swapped (Mondys/Mondays,
    vegitarian/vegetarian, centre/center) in words of five letters or more with the same first
    letter. Two edits are a different word: Austria/Australia."""
    if a == b:
        return True
    if min(len(a), len(b)) < 5 or a[0] != b[0] or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long_[i]:
        i += 1
    return short[i:] == long_[i + 1 :]


def _spelled_as(words: set[str], other: set[str]) -> set[str]:
    """`words` with each one-letter slip of a word of `other` spelled as in `other`."""
    only_other = other - words
    return {w if w in other else next((x for x in only_other if _one_slip(w, x)), w) for w in words}


def _synonyms_as(
    new: dict[str, str], old: dict[str, str], cn: set[str], co: set[str], lexicon: WordNet
) -> set[str]:
    """`cn` with each word the old text lacks spelled as an old-only word it is a synonym of."""
    only_old = {s: old[s] for s in co - cn}
    out = set()
    for stem in cn:
        if stem not in co and stem in new:
            stem = next((s for s, w in only_old.items() if lexicon.related(new[stem], w)), stem)
        out.add(stem)
    return out
