"""Units and magnitudes for the verifier: "100 megabits per second" and "100 megabytes per second"
carry the same number and ask different things, while "km" and "kilometres", "MB" and "megabytes",
"°C" and "degrees Celsius" are the same unit written two ways.

`mentions(text)` finds each unit (or magnitude: 5k, 5 million) with the set of canonical units it
may mean: a set, because some spellings are ambiguous ("mb" is megabytes or megabits, "$" any
dollar, "20 degrees" Celsius or Fahrenheit); two mentions agree when their sets meet. Symbols keep
their case where the convention gives it meaning (Mb megabit, MB megabyte, mW/MW); an all-lower or
all-upper spelling that no convention fixes is read as every unit it could be. Short symbols that
are also words or names ("m", "MS", "hp", "bar") count only right after a number; weak words
also after "how many" ("How many pounds is $100?"), except calendar words ("How many days does
delivery take?" names no unit).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .words import NUMBER_WORDS


def _table(text: str) -> dict[str, tuple[str, ...]]:
    """A "spelling=unit unit; ..." table (one line per few entries) as a dict."""
    out: dict[str, tuple[str, ...]] = {}
    for entry in text.replace("\n", ";").split(";"):
        if entry.strip():
            key, _, units = entry.partition("=")
            out[key.strip()] = tuple(units.split())
    return out


_SI = {"n": "nano", "µ": "micro", "u": "micro", "m": "milli", "c": "centi", "d": "deci", "h": "hecto"}
_SI |= {"k": "kilo", "M": "mega", "G": "giga", "T": "tera", "P": "peta"}
_IEC = {"Ki": "kibi", "Mi": "mebi", "Gi": "gibi", "Ti": "tebi", "Pi": "pebi"}
# base symbol: (names, prefixes it takes)
_BASES = {
    "m": (("metre", "meter"), "nµumcdk"),
    "g": (("gram", "gramme"), "µumk"),
    "s": (("second",), "nµum"),
    "l": (("litre", "liter"), "µumcd"),
    "W": (("watt",), "mkMGT"),
    "Wh": (("watt-hour", "watthour"), "kMGT"),
    "Hz": (("hertz",), "kMGT"),
    "J": (("joule",), "kM"),
    "V": (("volt",), "mk"),
    "A": (("amp", "ampere"), "mµ"),
    "Ah": (("amp-hour",), "m"),
    "Pa": (("pascal",), "hkMG"),
    "B": (("byte",), "kMGTP"),
    "b": (("bit",), "kMGT"),
    "cal": (("calorie",), "k"),
}
# Spelled words (matched in lower case, plurals folded): spelling=units; "pound" is lb or GBP.
_WORDS = _table("""
mile=mi; inch=in; yard=yd; foot=ft; feet=ft; nautical mile=nmi; light year=ly; light-year=ly; ounce=oz
fluid ounce=floz; fl oz=floz; pound=lb GBP; stone=st; ton=ton t; tonne=t; kilo=kg; pint=pt; quart=qt
gallon=gal; cup=cup; tablespoon=tbsp; teaspoon=tsp; celsius=°C; centigrade=°C; fahrenheit=°F; kelvin=K
degree=°C °F °; degrees celsius=°C; degree celsius=°C; degrees centigrade=°C; degrees fahrenheit=°F
degree fahrenheit=°F; degrees kelvin=K; radian=rad; minute=min; hour=h; day=day; week=week
fortnight=fortnight; month=month; year=year; decade=decade; century=century; millennium=millennium
acre=acre; hectare=ha; square foot=ft2; square feet=ft2; sq ft=ft2; square metre=m2; square meter=m2
sq m=m2; square kilometre=km2; square kilometer=km2; square mile=mi2; cubic metre=m3; cubic meter=m3
horsepower=hp; knot=kn; kilowatt hour=kWh; kilowatt-hour=kWh; percent=%; per cent=%; percentage point=pp
% point=pp; basis point=bp; dollar=USD CAD AUD NZD SGD HKD; buck=USD CAD AUD NZD; us dollar=USD
euro=EUR; pound sterling=GBP; quid=GBP; pence=GBp; penny=GBp; cent=cent; yen=JPY; yuan=CNY; renminbi=CNY
rupee=INR; franc=CHF; bitcoin=BTC; thousand=e3; million=e6; billion=e9; trillion=e12
""")
# Symbols, matched as written first (MB is not Mb), then folded where the case fixes nothing.
_SYMBOLS = _table("""
$=USD CAD AUD NZD SGD HKD; US$=USD; C$=CAD; A$=AUD; NZ$=NZD; HK$=HKD; R$=BRL; €=EUR; £=GBP; ¥=JPY CNY
₹=INR; ₩=KRW; ¢=cent; %=%; °=°C °F °; °C=°C; ºC=°C; °F=°F; ºF=°F; KB=kB; mcg=µg; kcal=kcal; Cal=kcal
mph=mi /h; kph=km /h; kmh=km /h; rpm=rev /min; mpg=mi /gal; psi=psi; mmHg=mmHg; mAh=mAh; ft=ft; yd=yd
oz=oz; lb=lb; lbs=lb; tbsp=tbsp; tsp=tsp; gal=gal; nmi=nmi; m²=m2; km²=km2; m³=m3; pp=pp; bps=b /s
bp=bp; USD=USD; EUR=EUR; GBP=GBP; JPY=JPY; CNY=CNY; RMB=CNY; INR=INR; CHF=CHF; CAD=CAD; AUD=AUD; NZD=NZD
SGD=SGD; HKD=HKD; SEK=SEK; NOK=NOK; DKK=DKK; KRW=KRW; BRL=BRL; ZAR=ZAR; MXN=MXN; BTC=BTC; ETH=ETH
""")
# Symbols and words that are also words, names or letters: units only right after a number.
_WEAK = set("m s h g l L t d w y A V W J K C F B b k M p c ms min mi hr hrs sec st pt qt hp bar atm".split())
_WEAK |= set("cal ha kn kt cc deg mo yr yrs wk mn mil bn tn Pa Ah PB TW MJ dm nm cl dl".split())
_WEAK_WORDS = set(
    """pound stone ton cup degree minute hour day week fortnight month year decade century
    millennium foot feet yard knot buck bit meter thousand million billion trillion cent penny franc
    second""".split()
)
# Letters and short forms that are a unit only right after a number (5k, 5m, 5 hrs).
_AFTER_NUMBER = _table("""
k=e3; K=K e3; m=m min e6; M=e6; mn=e6; mil=e6; bn=e9; b=b e9; B=B e9; tn=e12; s=s; sec=s; secs=s
min=min; mins=min; h=h; hr=h; hrs=h; d=day; wk=week; w=W week; mo=month; y=year; yr=year; yrs=year; C=°C
F=°F; t=t; p=GBp; c=cent; st=st; pt=pt; qt=qt; hp=hp; bar=bar; atm=atm; ha=ha; kn=kn; kt=kn; cc=ml
deg=°C °F °
""")
# "how many days" asks a duration, not a unit: calendar words count only after a number.
_CALENDAR = set(
    "second seconds minute minutes hour hours day days week weeks month months year years".split()
)
_TIME = {"s", "min", "h", "day", "week", "month", "year", "gal"}


def _prefixed() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """Prefixed SI/IEC units and data rates: (symbol -> units, spelled name -> units)."""
    syms: dict[str, tuple[str, ...]] = {"L": ("l",), "Kb": ("kb",)}
    names: dict[str, tuple[str, ...]] = {}
    for base, (words, prefixes) in _BASES.items():
        syms[base] = (base,)
        for w in words:
            names[w] = (base,)
        for p in prefixes:
            unit = p.replace("u", "µ") + base
            if p != "u":  # "um" is a filler, "us" a pronoun: micro is written µ
                syms[p + base] = (unit,)
            if base == "l":
                syms[p + "L"] = (unit,)
            for w in words:
                names[_SI[p] + w] = (unit,)
        if base in "Bb":
            for p, name in _IEC.items():
                syms[p + base] = (p + base,)
                names[name + words[0]] = (p + base,)
            for p in "kKMGT":
                unit = ("k" if p == "K" else p) + base
                syms[p + base + "ps"] = (unit, "/s")
                syms[p + base + "/s"] = (unit, "/s")
                if base == "b":
                    syms[p + "bit"] = (unit,)
                    syms[p + "bit/s"] = (unit, "/s")
    syms["km/h"] = ("km", "/h")
    syms["m/s"] = ("m", "/s")
    return syms, names


_PSYMS, _PNAMES = _prefixed()
_PSYMS["kb"] = ("kB", "kb")  # lower-case kb is written for either
_NAMES = _PNAMES | _WORDS  # spelled forms, matched in lower case
_NAMES["calorie"] = ("cal", "kcal")  # food calories are kcal
_PHRASE_FIRST = {re.split(r"[ -]", n)[0] for n in _NAMES if " " in n or "-" in n}
_EXACT = _PSYMS | _SYMBOLS  # symbols, case as written first
_FOLDED: dict[str, set[str]] = {}  # lower case -> every unit a spelling of it may be
for _s, _u in _EXACT.items():
    if len(_s) > 1:
        _FOLDED.setdefault(_s.lower(), set()).update(_u)
# Folded spellings that stand alone as units (lower case only: "ML" is machine learning).
_FOLDED_FREE = set("kb mb gb tb mbps kbps gbps km kg cm mm ml mg khz mhz ghz kw kwh mw gw mph kph".split())
# Lower-case "bps" is bits by convention (ISPs write 100mbps).
_LOWER_BITS = {"kbps": ("kb", "/s"), "mbps": ("Mb", "/s"), "gbps": ("Gb", "/s")}
_CURRENCY = {u for us in _SYMBOLS.values() for u in us if u.isupper() and len(u) == 3} | {"cent", "GBp"}
# Letters that stand for a unit after a number with a space between ("5 m"); others must touch it.
_SPACED = set("mglLhsKW")

_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[A-Za-zµμ°º$€£¥₹₩¢%²³]+(?:/[A-Za-z]+)?|\S")


@dataclass(frozen=True, slots=True)
class Mention:
    """One unit in a text: its first token, its char span, what it may mean, and its number."""

    index: int
    start: int
    end: int
    units: frozenset[str]
    quantity: str = ""  # the number it counts ("" when none)

    @property
    def key(self) -> str:
        return "|".join(sorted(self.units))


@lru_cache(maxsize=8192)
def _singular(w: str) -> str:
    if w.endswith(("feet", "celsius", "pence", "hertz", "lbs")):
        return w
    for suf, rep in (("ies", "y"), ("ches", "ch"), ("s", "")):
        if w.endswith(suf) and len(w) > len(suf) + 2:
            return w[: -len(suf)] + rep
    return w


def _lookup(tok: str, counted: bool) -> tuple[str, ...] | None:
    """One token as a unit: symbols (case as written, then folded), then spelled words. Weak
    spellings count only where `counted` (after a number, or a unit and to/in: "5 kg in pounds")."""
    if counted and tok in _AFTER_NUMBER:
        return _AFTER_NUMBER[tok]
    if tok in _WEAK and not counted:
        return None
    if tok in _EXACT:
        return _EXACT[tok]
    low = tok.lower()
    if low in _LOWER_BITS and tok in (low, low.capitalize()):
        return _LOWER_BITS[low]
    if low in _FOLDED and tok in (low, tok.upper(), tok.capitalize()) and (counted or tok in _FOLDED_FREE):
        return tuple(sorted(_FOLDED[low]))
    low = low.rstrip(".")
    for word in (low, low[:-1], _singular(low)):
        if word in _NAMES and (counted or word not in _WEAK_WORDS):
            return _NAMES[word]
    return None


def _phrase(words: list[str], i: int, counted: bool) -> tuple[tuple[str, ...] | None, int]:
    """The longest unit starting at token i: three- and two-token spellings, then one token."""
    first = words[i].lower()
    for width in (3, 2):
        if i + width <= len(words) and (first in _PHRASE_FIRST or _singular(first) in _PHRASE_FIRST):
            phrase = " ".join(words[i : i + width]).lower().replace(" - ", "-")
            for form in (phrase, _singular(phrase)):
                if form in _NAMES and (counted or form.split()[0] not in _WEAK_WORDS):
                    return _NAMES[form], width
    return _lookup(words[i], counted), 1


def _is_number(w: str) -> bool:
    return w[:1].isdigit() or w.lower() in NUMBER_WORDS


def _norm(q: str) -> str:
    q = q.lower().replace(",", "")
    return NUMBER_WORDS.get(q, q)


@lru_cache(maxsize=4096)
def mentions(text: str) -> tuple[Mention, ...]:
    """Every unit and magnitude in `text`, in order; a rate ("Mbps", "miles an hour") is two.
    Cached: a prompt is checked against several candidates, and a stored prompt many times."""
    toks = list(_TOKEN.finditer(text.replace("’", "'")))
    words = [m.group() for m in toks]
    out: list[Mention] = []
    last_end = -2  # token index after the last unit
    i = 0
    while i < len(words):
        j = i - 2 if i > 1 and words[i - 1] == "-" else i - 1  # "5-minute"
        prev = words[j] if j >= 0 else ""
        touching = j == i - 1 and j >= 0 and toks[j].end() == toks[i].start()
        number = prev if _is_number(prev) and (touching or len(words[i]) > 1 or words[i] in _SPACED) else ""
        conversion = prev.lower() in ("to", "into", "in") and last_end == i - 1
        counted = (
            bool(number)
            or conversion
            or (prev.lower() in ("many", "much") and words[i].lower() not in _CALENDAR)
        )
        units, width = _phrase(words, i, counted)
        if units is None or (len(number) == 4 and words[i] == "s"):  # the 1990s
            i += 1
            continue
        if not number and set(units) & _CURRENCY and i + 1 < len(words) and words[i + 1][:1].isdigit():
            number = words[i + 1]  # $5, USD 5
        start, end = toks[i].start(), toks[i + width - 1].end()
        parts = frozenset(u for u in units if not u.startswith("/"))
        rate = frozenset(u for u in units if u.startswith("/"))
        out.append(Mention(i, start, end, parts or rate, _norm(number) if number else ""))
        if parts and rate:
            out.append(Mention(i, start, end, rate))
        i += width
        last_end = i
        # "megabits per second", "miles an hour": the unit after per/a/an is a rate.
        if i + 1 < len(words) and words[i].lower() in ("per", "a", "an", "/", "each"):
            nxt = _lookup(words[i + 1], True)
            if nxt and (words[i].lower() in ("per", "/") or set(nxt) & _TIME):
                span = toks[i + 1]
                out.append(Mention(i + 1, span.start(), span.end(), frozenset("/" + u for u in nxt)))
                i += 2
                last_end = i
    return tuple(out)


def same_units(a: Sequence[Mention], b: Sequence[Mention]) -> bool:
    """Each mention of one text pairs with a mention of the other whose meanings meet."""
    if len(a) != len(b):
        return False
    if Counter(m.key for m in a) == Counter(m.key for m in b):
        return True
    return _matched(a, b, lambda x, y: bool(x.units & y.units))


def _matched(a: Sequence[Mention], b: Sequence[Mention], fits: Callable[[Mention, Mention], bool]) -> bool:
    """A perfect matching of a onto b under `fits` (augmenting paths; a handful of mentions)."""
    taken: dict[int, int] = {}  # b index -> a index

    def place(i: int, seen: set[int]) -> bool:
        for j, m in enumerate(b):
            if j in seen or not fits(a[i], m):
                continue
            seen.add(j)
            if j not in taken or place(taken[j], seen):
                taken[j] = i
                return True
        return False

    return len(a) == len(b) and all(place(i, set()) for i in range(len(a)))


def units_differ(new: str, old: str) -> str:
    """What differs between the two texts' units ("" = nothing): a unit one text lacks or reads
    otherwise ("Mb/MB"), or a number bound to another unit ("binding": 5 km to miles / 5 miles
    to km)."""
    a, b = mentions(new), mentions(old)
    if not a and not b:
        return ""
    if not same_units(a, b):
        return "/".join(sorted({m.key for m in a} ^ {m.key for m in b})) or "count"
    qa = [m for m in a if m.quantity]
    qb = [m for m in b if m.quantity]
    if not _matched(qa, qb, lambda x, y: x.quantity == y.quantity and bool(x.units & y.units)):
        return "binding"
    return ""


def without_units(text: str) -> str:
    """The text with its units cut out: the checks after units_differ compare the rest."""
    for m in reversed(mentions(text)):
        text = text[: m.start] + " " + text[m.end :]
    return text
