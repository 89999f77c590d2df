"""The cache evaluation's labelled pairs (loadtests/cache_data): the committed file is what the
seeded build makes, and its split keeps dev and test apart (families, frames, prompt texts)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from loadtests.cache_data import KINDS, NEGATIVE_KINDS, PATH, SPLITS, load
from loadtests.cache_data.build import FIELDS, PAIR_FRAMES, build, counts, dumps
from loadtests.cache_data.frames_pos import REWORDED

SOURCES = {"fow-cache", "own", "own-retyped"}


@pytest.fixture(scope="module")
def pairs() -> list[dict[str, object]]:
    return load()


def _norm(text: object) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", str(text).lower()))


def test_committed_file_equals_the_seeded_build() -> None:
    assert PATH.read_text(encoding="utf-8") == dumps(build()), (
        "pairs.jsonl is stale: python -m loadtests.cache_data.build"
    )


def test_records_have_the_fields_and_consistent_labels(pairs: list[dict[str, object]]) -> None:
    for r in pairs:
        assert tuple(r) == FIELDS, r
        assert r["kind"] in KINDS and r["split"] in SPLITS and r["source"] in SOURCES, r
        assert r["same"] is (r["kind"] == "paraphrase"), r
        assert r["a"] and r["b"] and r["a"] != r["b"], r


def test_ids_are_unique(pairs: list[dict[str, object]]) -> None:
    ids = Counter(str(r["id"]) for r in pairs)
    assert not [i for i, n in ids.items() if n > 1]


def test_no_pair_twice_in_either_order_nor_across_splits(pairs: list[dict[str, object]]) -> None:
    seen: dict[frozenset[str], str] = {}
    for r in pairs:
        key = frozenset((str(r["a"]), str(r["b"])))
        assert key not in seen, (r, seen.get(key))
        seen[key] = str(r["split"])


def test_every_family_lies_in_one_split(pairs: list[dict[str, object]]) -> None:
    sides: dict[str, set[str]] = defaultdict(set)
    for r in pairs:
        sides[str(r["family"])].add(str(r["split"]))
    assert all(len(s) == 1 for s in sides.values()), {f: s for f, s in sides.items() if len(s) > 1}
    assert len(sides) > 300  # many small families, not a few big ones


def test_no_prompt_text_is_on_both_sides(pairs: list[dict[str, object]]) -> None:
    texts = {s: {_norm(r[k]) for r in pairs if r["split"] == s for k in ("a", "b")} for s in SPLITS}
    assert not texts["dev"] & texts["test"]


def _frame_texts() -> dict[str, set[str]]:
    """Every text each own frame can produce (all forms, all rows), by frame."""
    out: dict[str, set[str]] = defaultdict(set)
    for i, (_, forms, rows) in enumerate(REWORDED):
        out[f"reworded-{i}"] = {f.format(*row) for f in forms for row in rows}
    for _, short, frames in PAIR_FRAMES:
        for i, (_, ta, tb, rows) in enumerate(frames):
            out[f"{short}-{i}"] = {t.format(*row) for t in (ta, tb) for row in rows}
    return out


def test_no_template_frame_spans_the_splits(pairs: list[dict[str, object]]) -> None:
    """A frame's texts, wherever they occur (its own pairs, near repeats, fow-cache), stay on one side."""
    frame_of: dict[str, set[str]] = defaultdict(set)
    for frame, texts in _frame_texts().items():
        for t in texts:
            frame_of[t].add(frame)
    sides: dict[str, set[str]] = defaultdict(set)
    for r in pairs:
        for frame in frame_of.get(str(r["a"]), set()) | frame_of.get(str(r["b"]), set()):
            sides[frame].add(str(r["split"]))
    assert len(sides) > 200
    assert all(len(s) == 1 for s in sides.values()), {f: s for f, s in sides.items() if len(s) > 1}


def test_counts_per_kind_and_split(pairs: list[dict[str, object]]) -> None:
    table = counts(pairs)
    assert len(pairs) >= 2000
    for kind in NEGATIVE_KINDS:
        assert sum(table[kind].values()) >= 120, (kind, table[kind])
    positives = sum(table["paraphrase"].values())
    assert 0.35 <= positives / len(pairs) <= 0.45
    for kind, row in table.items():
        assert 0.4 <= row["test"] / (row["dev"] + row["test"]) <= 0.6, (kind, row)


def test_sources_and_licences_are_stated(pairs: list[dict[str, object]]) -> None:
    used = {str(r["source"]) for r in pairs}
    assert used == SOURCES
    doc = (Path(PATH).parent / "SOURCES.md").read_text()
    assert all(f"`{s}`" in doc for s in used)
    assert "CC BY 4.0" in doc and "fow-cache 0.1.0" in doc
