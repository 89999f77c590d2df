"""Near repeats: the same prompt as people retype it (`paraphrase`, same = true).

One or two edits per prompt, drawn with the build's seeded generator: a typo (two letters
swapped, one dropped or doubled, in a word of six letters or more, never producing a word the
corpus uses elsewhere), lower case, a greeting or thanks around the question, a contraction
expanded or made, the final punctuation dropped or doubled. Nothing here knows what the cache
accepts.
"""

from __future__ import annotations

import random
import re

PREFIXES = [
    "Hi, ",
    "Hello! ",
    "Hey, ",
    "Quick question: ",
    "Sorry to bother you, but ",
    "Good morning. ",
    "Hi there, ",
    "So, ",
    "Um, ",
    "Can I ask something? ",
]
SUFFIXES = [
    " Thanks!",
    " Thank you.",
    " Cheers",
    " thanks in advance",
    " Please.",
    " pls",
    " Thanks a lot!",
    " :)",
]
CONTRACTIONS = [
    ("What is", "What's"),
    ("what is", "what's"),
    ("I am", "I'm"),
    ("do not", "don't"),
    ("does not", "doesn't"),
    ("cannot", "can't"),
    ("is not", "isn't"),
    ("I would", "I'd"),
    ("it is", "it's"),
    ("I have", "I've"),
    ("How is", "How's"),
    ("Where is", "Where's"),
    ("Who is", "Who's"),
    ("are not", "aren't"),
]
WORD = re.compile(r"[a-z]{6,}")


def _typo(text: str, rng: random.Random, vocab: set[str]) -> str:
    words = [m for m in WORD.finditer(text)]
    rng.shuffle(words)
    for m in words:
        w = m.group()
        i = rng.randrange(1, len(w) - 2)
        op = rng.choice(["swap", "drop", "double"])
        new = {
            "swap": w[:i] + w[i + 1] + w[i] + w[i + 2 :],
            "drop": w[:i] + w[i + 1 :],
            "double": w[:i] + w[i] + w[i:],
        }[op]
        if new != w and new not in vocab:
            return text[: m.start()] + new + text[m.end() :]
    return text


def _lower_first(text: str) -> str:
    first = text.split(" ", 1)[0]
    if first == "I" or first.startswith("I'") or not first[1:].islower():
        return text
    return text[0].lower() + text[1:]


def _contraction(text: str, rng: random.Random) -> str:
    options = [(a, b) for a, b in CONTRACTIONS if a in text] + [(b, a) for a, b in CONTRACTIONS if b in text]
    if not options:
        return text
    old, new = rng.choice(sorted(options))
    return text.replace(old, new, 1)


def _punctuation(text: str, rng: random.Random) -> str:
    if text[-1] in "?.!":
        return text[:-1] if rng.random() < 0.6 else text + text[-1]
    return text + "?"


def retype(text: str, rng: random.Random, vocab: set[str]) -> str:
    """`text` with one or two edits a person could make without changing what they ask."""
    ops = rng.sample(
        ["typo", "lower", "prefix", "suffix", "contraction", "punctuation"], rng.choice([1, 1, 2])
    )
    out = text
    for op in sorted(ops):
        if op == "typo":
            out = _typo(out, rng, vocab)
        elif op == "lower":
            out = out.lower()
        elif op == "prefix":
            out = rng.choice(PREFIXES) + _lower_first(out)
        elif op == "suffix":
            out = out + rng.choice(SUFFIXES)
        elif op == "contraction":
            out = _contraction(out, rng)
        else:
            out = _punctuation(out, rng)
    if out == text:  # no edit applied (no long word, no contraction): greet instead
        out = rng.choice(PREFIXES) + _lower_first(text)
    return out


def vocabulary(texts: list[str]) -> set[str]:
    """Every lower-case word the corpus uses: a typo must not turn one word into another."""
    return {w for t in texts for w in re.findall(r"[a-z]+", t.lower())}
