"""Verifier: does a semantic candidate really ask the same thing? Cheap, deterministic checks.

Cosine on MiniLM puts "Is X included?" and "Is X excluded?" side by side, so a candidate above
the similarity floor still has to agree with the new prompt on:
- numbers (digits and number words, as a multiset: 1066 vs 1666, "two-year" vs "2-year" agree;
  a time keeps its am/pm: 7am vs 7pm differ);
- polarity: negation words (not/no/never/n't/without/...) and negative-polarity verbs
  (avoid/ban/stop/exclude/...) counted together, parity must agree;
- antonymy: a lexicon of opposite pairs compared on stems (open/closed, weekdays/weekends,
  adults/children), and morphological opposites (suitable/unsuitable, successful/unsuccessful:
  one side has a word the other has with a negative prefix);
- roles: "from X to Y" against "from Y to X" (transfers, directions), and named entities
  (capitalised or mixed-case words, acronyms) as a set and in order;
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

_WORD = re.compile(r"\d+(?:[.,:]\d+)*\s?(?:am|pm)\b|[A-Za-z][A-Za-z'\-]*|\d+(?:[.,]\d+)*", re.IGNORECASE)
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
# Verbs that negate what follows ("avoid X" ~ "not X"): they flip polarity like a negation word.
_NEGATIVE_VERBS = {
    "avoid",
    "ban",
    "forbid",
    "prohibit",
    "exclude",
    "stop",
    "cease",
    "prevent",
    "refuse",
    "skip",
    "lack",
    "omit",
    "quit",
    "deny",
    "fail",
}
_NEG_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "non-")
# "off-X" against X (peak/off-peak, season/off-season): MiniLM puts them at 0.95-0.97, and the
# word split reads "off-peak" as an added word "off", which passed as a mere addition.
_OFF = re.compile(r"\boff-([a-z]{3,})", re.IGNORECASE)
_IRREGULAR = {"children": "child", "men": "man", "women": "woman", "people": "person", "kids": "kid"}
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
    ("best", "worst"),
    ("better", "worse"),
    ("over", "under"),
    ("within", "after"),
    ("higher", "lower"),
    ("high", "low"),
    ("pass", "fail"),
    ("win", "lose"),
    ("won", "lost"),
    ("success", "failure"),
    ("full", "part"),
    ("busy", "quiet"),
    ("compulsory", "optional"),
    ("mandatory", "optional"),
    ("approve", "reject"),
    ("early", "late"),
    ("first", "last"),
    ("old", "new"),
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
    ("man", "woman"),
    ("adult", "child"),
    ("adult", "kid"),
    ("am", "pm"),
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
) | {"um", "uh", "er", "erm", "hmm", "yeah", "hey", "hiya"}  # spoken fillers and greetings
# Pleasantries around the question ("Hi, quick one: ...", "Morning! ...", "... Thanks in advance"):
# not part of what is asked. "quick one" would otherwise read as the number 1, "Morning" as a time.
_HELLO = r"(?:hi|hello|hey|hiya|greetings|(?:good\s+)?(?:morning|afternoon|evening))(?:\s+there|\s+all)?\s*[,!.:;\-]+\s*"
_GREETING = re.compile(
    rf"^\s*(?:{_HELLO})?"
    r"(?:(?:quick|simple|silly)\s+(?:one|question|q)|just\s+wondering|sorry(?:\s+to\s+bother\s+you)?)\s*[,!.:;\-]+\s*",
    re.IGNORECASE,
)
_GREETING_ONLY = re.compile(rf"^\s*{_HELLO}", re.IGNORECASE)
_THANKS = re.compile(
    r"[\s,.!;:\-]*\b(?:thanks|thank\s+you|thx|cheers|ta)(?:\s+(?:so|very)\s+much)?(?:\s+in\s+advance)?[\s.!]*$",
    re.IGNORECASE,
)


def strip_pleasantries(text: str) -> str:
    """The question without a greeting before it or thanks after it."""
    out = _GREETING.sub("", text, count=1)
    out = _GREETING_ONLY.sub("", out, count=1)
    out = _THANKS.sub("", out)
    return out.strip() or text


# Contractions: the part before the apostrophe carries the word ("what's" -> what, "I'm" -> I).
_CONTRACTION = re.compile(r"'(?:s|m|re|ve|d|ll)$", re.IGNORECASE)


def _words(text: str) -> list[str]:
    out = []
    for w in _WORD.findall(text.replace("’", "'")):
        if w.lower().endswith("n't"):
            out += [w[:-3], "not"]
        else:
            out += [p for p in w.split("-") if p]
    return out


def _stem(w: str) -> str:
    w = w.lower().strip("'").removesuffix("'s")
    w = _IRREGULAR.get(w, w)
    for suf in ("ing", "ies", "ied", "es", "ed", "s"):
        if len(w) > len(suf) + 2 and w.endswith(suf):
            w = w[: -len(suf)]
            break
    return w.rstrip("e") if len(w) > 3 else w  # close/closed/closing -> clos


_ANTONYM_STEMS = [(_stem(x), _stem(y)) for x, y in _ANTONYMS]
_NEGATIVE_STEMS = {_stem(w) for w in _NEGATIVE_VERBS}


def numbers(text: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for w in _words(text):
        lw = w.lower().replace(" ", "")
        if lw[0].isdigit():
            out[lw.replace(",", "")] += 1
        elif lw in _NUMBER_WORDS:
            out[_NUMBER_WORDS[lw]] += 1
    return out


def negations(text: str) -> int:
    """Negation words and negative-polarity verbs (avoid, ban, stop, ...): only the parity matters."""
    return sum(
        1
        for w in _words(text)
        if w.lower() in _NEGATIONS or w.lower().startswith("un-") or _stem(w) in _NEGATIVE_STEMS
    )


def opposite(new: str, old: str) -> str:
    """An antonym pair across the two texts (lexicon on stems, or a negative prefix); "" = none."""
    sn = {_stem(w) for w in _words(new)}
    so = {_stem(w) for w in _words(old)}
    for x, y in _ANTONYM_STEMS:
        if (x in sn and y in so and y not in sn) or (y in sn and x in so and x not in sn):
            return f"{x}/{y}"
    for a_text, b_text in ((new, old), (old, new)):
        off_a = {m.group(1).lower() for m in _OFF.finditer(a_text)}
        off_b = {m.group(1).lower() for m in _OFF.finditer(b_text)}
        for w in off_a - off_b:
            if w in {x.lower() for x in _words(b_text)}:
                return f"{w}/off-{w}"
    wn = {w.lower() for w in _words(new)}
    wo = {w.lower() for w in _words(old)}
    for a, b in ((wn - wo, wo - wn), (wo - wn, wn - wo)):
        for w in a:
            for pre in _NEG_PREFIXES:
                if w.startswith(pre) and len(w) - len(pre) >= 4 and w[len(pre) :] in b:
                    return f"{w[len(pre) :]}/{w}"
    return ""


_FROM_TO = re.compile(
    r"\bfrom\s+(?:my\s+|the\s+|a\s+|an\s+)?([\w' -]+?)\s+(?:to|into)\s+(?:my\s+|the\s+|a\s+|an\s+)?([\w' -]+?)(?:[?.!,]|$)",
    re.IGNORECASE,
)


def slot_changed(new: str, old: str, lexicon: WordNet | None = None) -> str:
    """The same sentence frame with one slot filled differently ("for a puppy" / "for a kitten",
    "home insurance" / "car insurance"): a different question, whatever the cosine says. Returns
    the changed slot ("puppy/kitten"), or "" when the texts differ in more than one place, or only
    by a typo or an inflection of the same word."""
    # Number words as digits: numbers() has compared those already.
    a = [_NUMBER_WORDS.get(w.lower(), w.lower()) for w in _words(old)]
    b = [_NUMBER_WORDS.get(w.lower(), w.lower()) for w in _words(new)]
    ops = [o for o in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if o[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return ""
    _, i1, i2, j1, j2 = ops[0]
    x = " ".join(w for w in a[i1:i2] if w not in _STOP)
    y = " ".join(w for w in b[j1:j2] if w not in _STOP)
    if i2 - i1 > 2 or j2 - j1 > 2 or not x or not y:
        return ""
    if _stem(x) == _stem(y) or difflib.SequenceMatcher(None, x, y).ratio() >= 0.8:
        return ""  # a typo or an inflection
    if lexicon is not None and lexicon.related(x, y):
        return ""  # the same slot in other words (change/switch)
    return f"{x}/{y}"


def roles_swapped(new: str, old: str) -> bool:
    """ "from A to B" in one text, "from B to A" in the other."""
    mn, mo = _FROM_TO.search(new), _FROM_TO.search(old)
    if not (mn and mo):
        return False
    a1, b1 = content(mn.group(1)), content(mn.group(2))
    a2, b2 = content(mo.group(1)), content(mo.group(2))
    return bool(a1 & b2) and bool(b1 & a2) and not (a1 & a2)


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
        if (caps or mixed) and _base(tok) not in _STOP and tok != "I":
            out.append(_base(tok))  # Australia's -> australia
        start = False
    return out


def _base(w: str) -> str:
    return _CONTRACTION.sub("", w.lower())


def content(text: str) -> set[str]:
    return set(content_words(text))


def content_words(text: str) -> dict[str, str]:
    """Content words as stem -> the word as written (lower case)."""
    return {
        _stem(w): _base(w)
        for w in _words(text)
        if _base(w) not in _STOP
        and w.lower() not in _NEGATIONS
        and w.lower() not in _NUMBER_WORDS  # numbers() compares those
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

    def check(self, new: str, old: str, similarity: float) -> Verdict:
        if not self.enabled or new.strip().lower() == old.strip().lower():
            return Verdict(True)
        new, old = strip_pleasantries(new), strip_pleasantries(old)
        if numbers(new) != numbers(old):
            return Verdict(False, "numbers")
        if negations(new) % 2 != negations(old) % 2:
            return Verdict(False, "negation")
        opp = opposite(new, old)
        if opp:
            return Verdict(False, f"antonym:{opp}")
        en, eo = [_stem(e) for e in entities(new)], [_stem(e) for e in entities(old)]  # Sundays ~ Sunday
        if _entity_missing(en, old) or _entity_missing(eo, new):
            return Verdict(False, "entities")
        if _dedupe([e for e in en if e in eo]) != _dedupe([e for e in eo if e in en]) or roles_swapped(
            new, old
        ):
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
    tokens = _words(other) + re.findall(_ENTITY_TOKEN, other)  # "Wi-Fi", "P60" whole as well
    words = {_stem(_base(w)) for w in tokens}
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


def _dedupe(xs: list[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in xs if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]
