"""Relative time for the verifier: "the forecast for this weekend" and "for next weekend", "an
appointment tomorrow" and "the day after tomorrow" share every number and nearly every word (cosine
0.95-0.99), and ask about different days.

`shifts(text)` lists the time references that move away from now: tomorrow, yesterday, ago ("2
weeks ago" is not "in 2 weeks"), next/last
+ a time word (next week, last Monday, the coming weekend; not "the last day", "the last week of
June", which are final, nor "than last month", which is what the question compares with), and a
time word + before/after ("the day before Diwali", "the week after Easter"). The present is the default and is not listed: today,
tonight, this week, the weekend all read as now, so "What's on tonight?" and "What's on this
evening?" agree. Two texts must list the same shifts.
"""

from __future__ import annotations

from collections import Counter

from .words import split_words

_UNITS = set(
    """day days week weeks weekend weekends fortnight month months year years morning afternoon
    evening night term semester quarter season spring summer autumn fall winter monday tuesday
    wednesday thursday friday saturday sunday mondays tuesdays wednesdays thursdays fridays
    saturdays sundays christmas easter""".split()
)
_NEXT = {"next", "coming", "upcoming", "following"}
_LAST = {"last", "previous", "past"}


def shifts(text: str) -> Counter[str]:
    """Time references away from now, as "tomorrow", "next:week", "day:before", ..."""
    words = [w.lower().removesuffix("'s") for w in split_words(text)]  # tomorrow's
    out: Counter[str] = Counter()
    for i, w in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if w in ("tomorrow", "yesterday", "ago") and not (i > 1 and words[i - 1] in ("after", "before")):
            out[w] += 1
        elif w in _UNITS and nxt in ("after", "before"):
            out[f"{w.rstrip('s')}:{nxt}"] += 1  # the day after tomorrow, the week before Easter
        elif w in _NEXT | _LAST:
            j = i + 1
            while j < len(words) and words[j] in _NEXT:  # "this coming weekend"
                j += 1
            if j == len(words) or words[j] not in _UNITS:
                continue
            final = j + 1 < len(words) and words[j + 1] == "of" or words[j] == "day"  # last day of June
            than = i > 0 and words[i - 1] == "than"  # "higher than last month": what it is compared with
            if w in _NEXT or not (final or than or j > i + 1):
                out[f"{'next' if w in _NEXT else 'last'}:{words[j].rstrip('s')}"] += 1
    return out


def time_differs(new: str, old: str) -> str:
    """ "" when both texts point at the same time, else the references that differ."""
    a, b = shifts(new), shifts(old)
    if a == b:
        return ""
    return "/".join(sorted((a - b) + (b - a))) or "time"
