"""The cache's hit decision for one (cached a, new b) pair: the one place the evaluation asks it.

It mirrors services/cache/lookup.py (`SemanticCache._find` and `_choose`) for one candidate whose
cosine is known, with the policy and verifier built as stage.py builds them from `Settings()`:
- a candidate is considered at `similarity >= policy.lowest_for(tenant)`;
- it is served when its own threshold (`budget.threshold` of its checked reuses) accepts the
  similarity and `verifier.check(new prompt, stored prompt, similarity)` passes; the stored
  prompt is the cached text cut to 2,000 characters, as store.py writes it. Every entry here is
  fresh (each `a` cached once, never reused), so its threshold is the tenant's floor;
- the verifier's verdict is then reviewed by the learned pair model (services/cache/pairmodel.py,
  issue #35): a pass it doubts is vetoed, a refusal only for the new-words floors it is sure of
  is served. SY_CACHE_PAIR_MODEL=false (or SY_CACHE_VERIFY=false) turns it off, as in stage.py.
When lookup.py decides otherwise (another check, another threshold), change this function and
nothing else: every figure the evaluation reports goes through it.
"""

from __future__ import annotations

from functools import cache

from services.cache.budget import EntryStats, threshold
from services.cache.pairmodel import MODEL_PATH, PairModel
from services.cache.policy import CachePolicy
from services.cache.stage import policy_from
from services.cache.verify import Verifier
from shared.runtime.config import Settings

STORED_PROMPT_CHARS = 2000  # store.py keeps `key.text[:2000]` as the entry's prompt


@cache
def _cache_parts() -> tuple[CachePolicy, Verifier]:
    s = Settings()
    verifier = Verifier(
        novel_floor=s.cache_novel_floor, added_floor=s.cache_added_floor, enabled=s.cache_verify
    )
    return policy_from(s), verifier


@cache
def _pair_model() -> PairModel | None:
    """The committed pair model with the verifier's lexicon, unless settings turn it off."""
    s = Settings()
    if not (s.cache_pair_model and s.cache_verify) or not MODEL_PATH.exists():
        return None
    return PairModel.load(lexicon=_cache_parts()[1].lexicon)


def default_floor(tenant: str = "") -> float:
    """The similarity floor the cache applies to this tenant (SY_CACHE_SIMILARITY_FLOOR, or the tenant's)."""
    return _cache_parts()[0].floor_for(tenant)


def decide(a: str, b: str, cosine: float, floor: float | None = None, tenant: str = "") -> bool:
    """Would a lookup of `b` be served the (fresh) entry cached for `a`, the two at this cosine?
    `floor` replaces the tenant's floor (the CLI's --floor)."""
    policy, verifier = _cache_parts()
    prior = policy.floor_for(tenant) if floor is None else floor
    lowest = policy.lowest_for(tenant) if floor is None else floor
    if cosine < lowest:
        return False  # not among the candidates lookup.py checks
    if not threshold(EntryStats(), prior, lowest, policy.target_for(tenant)).accepts(cosine):
        return False
    old = a[:STORED_PROMPT_CHARS]
    verdict = verifier.check(b, old, cosine)
    model = _pair_model()
    return (verdict if model is None else model.review(b, old, cosine, verdict)).ok
