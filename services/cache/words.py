"""The verifier's vocabulary: word splitting, stems, number words, negations, antonyms, stop words.

Data and text helpers only; the checks that use them are in verify.py.
"""

from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"\d+(?:[.,:]\d+)*\s?(?:am|pm)\b|[A-Za-z][A-Za-z'\-]*|\d+(?:[.,]\d+)*", re.IGNORECASE)
NUMBER_WORDS = {
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
NEGATIONS = {"not", "no", "never", "without", "none", "nobody", "nothing", "neither", "nor", "cannot", "non"}
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
NEG_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "non-")
# "off-X" against X (peak/off-peak, season/off-season): MiniLM puts them at 0.95-0.97, and the
# word split reads "off-peak" as an added word "off", which passed as a mere addition.
OFF_PREFIX = re.compile(r"\boff-([a-z]{3,})", re.IGNORECASE)
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
STOP_WORDS = set(
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
CONTRACTION = re.compile(r"'(?:s|m|re|ve|d|ll)$", re.IGNORECASE)


def split_words(text: str) -> list[str]:
    return list(_split(text))


@lru_cache(maxsize=8192)
def _split(text: str) -> tuple[str, ...]:
    """Kept: every check of a pair splits the same two texts again."""
    out: list[str] = []
    for w in _WORD.findall(text.replace("’", "'")):
        if w.lower().endswith("n't"):
            out += [w[:-3], "not"]
        else:
            out += [p for p in w.split("-") if p]
    return tuple(out)


@lru_cache(maxsize=65536)
def stem_of(w: str) -> str:
    w = w.lower().strip("'").removesuffix("'s")
    w = _IRREGULAR.get(w, w)
    for suf in ("ing", "ies", "ied", "es", "ed", "s"):
        if len(w) > len(suf) + 2 and w.endswith(suf):
            w = w[: -len(suf)]
            break
    return w.rstrip("e") if len(w) > 3 else w  # close/closed/closing -> clos


ANTONYM_STEMS = [(stem_of(x), stem_of(y)) for x, y in _ANTONYMS]
NEGATIVE_STEMS = {stem_of(w) for w in _NEGATIVE_VERBS}
