"""The cache's hit decision for one (cached a, new b) pair: the one place the evaluation asks it.

It mirrors services/cache/lookup.py, `SemanticCache._find`, for a candidate whose cosine is
known: a candidate counts only at `similarity >= policy.floor_for(tenant)` (the policy built by
stage.py's `policy_from(Settings())`), then `verifier.check(new prompt, stored prompt, similarity)`
where the stored prompt is the cached text cut to 2,000 characters as store.py writes it, and
the verifier is built from the settings as stage.py builds it. When lookup.py decides otherwise
(another check, another threshold), change this function and nothing else: every figure the
evaluation reports goes through it.
"""

from __future__ import annotations

from functools import cache

from services.cache.stage import policy_from
from services.cache.verify import Verifier
from shared.runtime.config import Settings

STORED_PROMPT_CHARS = 2000  # store.py keeps `key.text[:2000]` as the entry's prompt


@cache
def _cache_parts(tenant: str) -> tuple[float, Verifier]:
    s = Settings()
    verifier = Verifier(
        novel_floor=s.cache_novel_floor, added_floor=s.cache_added_floor, enabled=s.cache_verify
    )
    return policy_from(s).floor_for(tenant), verifier


def default_floor(tenant: str = "") -> float:
    """The similarity floor the cache applies to this tenant (SY_CACHE_SIMILARITY_FLOOR, or the tenant's)."""
    return _cache_parts(tenant)[0]


def decide(a: str, b: str, cosine: float, floor: float | None = None, tenant: str = "") -> bool:
    """Would a lookup of `b` be served the entry cached for `a`, the two at this cosine?"""
    tenant_floor, verifier = _cache_parts(tenant)
    if cosine < (tenant_floor if floor is None else floor):
        return False
    return verifier.check(b, a[:STORED_PROMPT_CHARS], cosine).ok
