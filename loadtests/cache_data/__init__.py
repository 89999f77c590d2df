"""Labelled prompt pairs for the semantic cache's hit decision (issue #35).

`pairs.jsonl`, one record a line: `id`; `a`, the prompt whose answer is cached; `b`, the new
prompt; `kind`; `same` (true: b may be served a's answer); `source`; `family` (pairs from the
same template frame, source item or shared prompt text); `split` ("dev" or "test"); `domain`.

Kinds: `paraphrase` (same = true: rewordings, near repeats such as typos, casing, greetings,
contractions, clauses reordered, symmetric swaps "A and B" -> "B and A", commutative sums) and
nine negatives (same = false): `negation`, `swapped_roles`, `changed_number`, `changed_date`,
`changed_unit`, `added_constraint`, `different_name`, `different_language_or_product`,
`same_topic_different_question`.

Sources (SOURCES.md has the licences):
- `fow-cache`: the 600 question pairs bundled in the PyPI package fow-cache 0.1.0 (data CC BY
  4.0, code MIT, by Mabon ap Gwyn), relabelled onto our kinds item by item (fow.py);
- `own`: frames written for this set (frames_*.py, this project's licence) in many domains and
  wordings, filled from rows; `own-retyped`: near repeats of own prompts (noise.py).
  They were written without reading what the cache's verifier accepts.

Split: families, never single pairs, go to dev or test (a frame is one family, so no template is
seen on both sides; pairs that share a prompt text are joined into one family), stratified by
kind, about half each, with a fixed seed (`SPLIT_SEED`). Tune on dev; report test.

`python -m loadtests.cache_data.build` regenerates pairs.jsonl (fixed seeds; `--check` only
compares); tests/unit/test_cache_data.py checks the committed file equals regeneration.
"""

from __future__ import annotations

import json
from pathlib import Path

PATH = Path(__file__).with_name("pairs.jsonl")
SPLIT_SEED = 35  # the number; changing it reshuffles dev/test
BUILD_SEED = 20350  # which forms pair up, which prompts are retyped and how
SPLITS = ("dev", "test")
NEGATIVE_KINDS = (
    "negation",
    "swapped_roles",
    "changed_number",
    "changed_date",
    "changed_unit",
    "added_constraint",
    "different_name",
    "different_language_or_product",
    "same_topic_different_question",
)
KINDS = ("paraphrase", *NEGATIVE_KINDS)


def load(split: str | None = None, path: Path = PATH) -> list[dict[str, object]]:
    """The committed pairs, all or one split's."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if split is None or r["split"] == split]
