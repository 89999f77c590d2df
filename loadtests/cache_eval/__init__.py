"""Offline evaluation of the semantic cache's hit decision on labelled prompt pairs (issue #35).

Data: loadtests/cache_data (2,384 pairs: fow-cache's 600, relabelled, and own frames in many
domains; one paraphrase kind and nine kinds of near miss; SOURCES.md has the licences).

Protocol:
- Pairs are split once, by family (a template frame, a source item, or prompts that share a
  text), stratified by kind, with a fixed seed: no frame is on both sides.
- The decision is the cache's own, in one function (`decision.decide`): MiniLM cosine of a and b
  (services.cache.embed.load_minilm), at least the tenant's floor (Settings'
  cache_similarity_floor by default), then the cache's verifier as lookup.py calls it.
- `python -m loadtests.cache_eval` reports the TEST split: served rate on positives and false-hit
  rate on negatives, each with a Wilson 95% interval, per kind and overall, with counts and
  the cosine floor alone beside them. `--split dev` is for tuning, and `--show-failures` lists
  failing pairs for dev only (refused for test: reading them would make test data tuning data).
  `--json out.json` writes the report; `--quick` keeps a third of each kind.
- One pair is one lookup against one cached prompt (its partner); Milvus is not involved.
"""

from loadtests.cache_eval.cli import REFUSE_TEST_FAILURES, main, run
from loadtests.cache_eval.decision import decide, default_floor
from loadtests.cache_eval.report import evaluate, summary, table
from loadtests.cache_eval.stats import rate, wilson

__all__ = [
    "REFUSE_TEST_FAILURES",
    "decide",
    "default_floor",
    "evaluate",
    "main",
    "rate",
    "run",
    "summary",
    "table",
    "wilson",
]
