"""Regenerate pairs.jsonl: `python -m loadtests.cache_data.build [--check]`.

fow-cache's pairs (fow.py) + own frames (frames_*.py) + near repeats of own prompts (noise.py)
up to 40% positives; families joined over frames, template strings and shared prompt texts;
then the grouped, kind-stratified dev/test split. Everything is seeded: the same packages give
the same file, byte for byte (tests/unit/test_cache_data.py checks the committed one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections import Counter, defaultdict

from loadtests.cache_data import BUILD_SEED, KINDS, PATH, SPLIT_SEED, SPLITS
from loadtests.cache_data.fow import fow_pairs
from loadtests.cache_data.frames_neg_a import CHANGED_NUMBER, NEGATION, SWAPPED_ROLES
from loadtests.cache_data.frames_neg_b import ADDED_CONSTRAINT, CHANGED_DATE, CHANGED_UNIT
from loadtests.cache_data.frames_neg_c import DIFFERENT_LANGUAGE_OR_PRODUCT, DIFFERENT_NAME, SAME_TOPIC
from loadtests.cache_data.frames_pos import REWORDED, SAME_PAIRS
from loadtests.cache_data.noise import retype, vocabulary

POSITIVE_SHARE = 0.40
FIELDS = ("id", "a", "b", "kind", "same", "source", "family", "split", "domain")
PAIR_FRAMES = [
    ("paraphrase", "same", SAME_PAIRS),
    ("negation", "neg", NEGATION),
    ("swapped_roles", "swap", SWAPPED_ROLES),
    ("changed_number", "num", CHANGED_NUMBER),
    ("changed_date", "date", CHANGED_DATE),
    ("changed_unit", "unit", CHANGED_UNIT),
    ("added_constraint", "added", ADDED_CONSTRAINT),
    ("different_name", "name", DIFFERENT_NAME),
    ("different_language_or_product", "product", DIFFERENT_LANGUAGE_OR_PRODUCT),
    ("same_topic_different_question", "topic", SAME_TOPIC),
]
Record = dict[str, object]


def _record(a: str, b: str, kind: str, group: str, domain: str, templates: list[str]) -> Record:
    return {
        "a": a,
        "b": b,
        "kind": kind,
        "same": kind == "paraphrase",
        "source": "own",
        "group": group,
        "domain": domain,
        "templates": templates,
    }


def own_pairs(rng: random.Random) -> list[Record]:
    """Every own frame filled with each of its rows."""
    out: list[Record] = []
    for i, (domain, forms, rows) in enumerate(REWORDED):
        group = f"own-reworded-{i:02d}"
        if rows == [()]:
            out += [_record(forms[0], f, "paraphrase", group, domain, forms) for f in forms[1:]]
            continue
        for row in rows:
            x, y = rng.sample(range(len(forms)), 2)
            out.append(
                _record(forms[x].format(*row), forms[y].format(*row), "paraphrase", group, domain, forms)
            )
    for kind, short, frames in PAIR_FRAMES:
        for i, (domain, ta, tb, rows) in enumerate(frames):
            group = f"own-{short}-{i:02d}"
            out += [_record(ta.format(*r), tb.format(*r), kind, group, domain, [ta, tb]) for r in rows]
    return out


def retyped(records: list[Record], n: int, rng: random.Random) -> list[Record]:
    """`n` near repeats of own cached prompts, spread over the frames (one each before a second)."""
    vocab = vocabulary([str(r[k]) for r in records for k in ("a", "b")])
    pool = list({str(r["a"]): r for r in records if r["source"] == "own"}.items())
    rng.shuffle(pool)
    seen: Counter[str] = Counter()
    ranked = []
    for text, r in pool:
        seen[str(r["group"])] += 1
        ranked.append((seen[str(r["group"])], text, r))
    ranked.sort(key=lambda t: t[0])  # stable: the shuffle decides within a rank
    out = []
    for _, text, r in ranked[:n]:
        new = retype(text, rng, vocab)
        a, b = (new, text) if rng.random() < 0.25 else (text, new)
        rec = _record(a, b, "paraphrase", str(r["group"]), str(r["domain"]), [])
        rec["source"] = "own-retyped"
        out.append(rec)
    return out


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def join_families(records: list[Record]) -> None:
    """family = the smallest group label among groups joined by a shared template or prompt text."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(x: str, y: str) -> None:
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)

    for r in records:
        g = f"g:{r['group']}"
        for node in [f"t:{_norm(str(r['a']))}", f"t:{_norm(str(r['b']))}"] + [
            f"p:{t}" for t in r.get("templates", [])
        ]:  # type: ignore[attr-defined]
            union(g, node)
    # "g:" sorts before "p:" and "t:", so a component's root is its smallest group label.
    for r in records:
        r["family"] = find(f"g:{r['group']}")[2:]


def assign_splits(records: list[Record], seed: int = SPLIT_SEED) -> None:
    """Whole families to dev or test, largest first, each to the side that lacks more of its kinds."""
    rng = random.Random(seed)
    fams: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        fams[str(r["family"])][str(r["kind"])] += 1
    names = sorted(fams)
    rng.shuffle(names)
    names.sort(key=lambda f: -sum(fams[f].values()))
    total = Counter(str(r["kind"]) for r in records)
    have = {s: Counter[str]() for s in SPLITS}
    side: dict[str, str] = {}
    for f in names:
        need = {s: sum(c * (total[k] / 2 - have[s][k]) for k, c in fams[f].items()) for s in SPLITS}
        s = max(SPLITS, key=lambda x: (need[x], rng.random()))
        side[f] = s
        have[s].update(fams[f])
    for r in records:
        r["split"] = side[str(r["family"])]


def build() -> list[Record]:
    """All pairs, labelled, grouped and split; sorted by family then id."""
    rng = random.Random(BUILD_SEED)
    records = fow_pairs() + own_pairs(rng)
    pos = sum(1 for r in records if r["same"])
    n = round(POSITIVE_SHARE / (1 - POSITIVE_SHARE) * (len(records) - pos)) - pos
    records += retyped(records, max(n, 0), rng)
    unique: dict[frozenset[str], Record] = {}
    for r in records:
        key = frozenset((str(r["a"]), str(r["b"])))
        if r["a"] == r["b"]:
            raise ValueError(f"a equals b: {r}")
        if key in unique and unique[key]["same"] != r["same"]:
            raise ValueError(f"one pair, two labels: {r} vs {unique[key]}")
        unique.setdefault(key, r)
    records = list(unique.values())
    for r in records:
        if "id" not in r:
            digest = hashlib.sha1(f"{r['a']}\n{r['b']}".encode()).hexdigest()[:10]
            r["id"] = f"{r['source']}-{r['kind']}-{digest}"
    join_families(records)
    assign_splits(records)
    out = [{k: r[k] for k in FIELDS} for r in records]
    return sorted(out, key=lambda r: (str(r["family"]), str(r["id"])))


def dumps(records: list[Record]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def counts(records: list[Record]) -> dict[str, dict[str, int]]:
    """Pairs per kind and split (the build prints it; the tests check it)."""
    table = {k: {s: 0 for s in SPLITS} for k in KINDS}
    for r in records:
        table[str(r["kind"])][str(r["split"])] += 1
    return table


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m loadtests.cache_data.build")
    ap.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    args = ap.parse_args()
    records = build()
    text = dumps(records)
    for kind, row in counts(records).items():
        print(f"{kind:32s} dev {row['dev']:4d}  test {row['test']:4d}")
    print(f"{len(records)} pairs, {len({r['family'] for r in records})} families, split seed {SPLIT_SEED}")
    if args.check:
        same = PATH.exists() and PATH.read_text(encoding="utf-8") == text
        print("pairs.jsonl is up to date" if same else "pairs.jsonl differs from the build")
        sys.exit(0 if same else 1)
    PATH.write_text(text, encoding="utf-8")
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
