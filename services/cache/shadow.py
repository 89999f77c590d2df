"""Shadow mode and exploration: the cache's reuses checked against the engine's own answers.

- Shadow: a sampled share (SY_CACHE_SHADOW_RATE) of semantic hits is also sent to the engine,
  as a request of its own: id `<request id>:shadow:<8 hex>`, CacheInfo.tier "shadow" (its
  records carry the job header `cache_shadow`, which the gateway passes over), `no_store`, no
  stream. The client has its reply from the cache already; the engine's answer reaches only the
  cache's write-back, which compares it with the stored one, never stores it, and counts the
  outcome for the entry (budget.py) and for the tenant's false-hit estimate (the metrics below).
- Exploration (vCache's "explore"): a miss whose most similar candidate the verifier passed but
  whose learned threshold (or the tenant's floor) refused it goes to the engine anyway; with the
  same sampled share it carries that candidate (tier "explore"), and its answer, stored as usual,
  is compared with the candidate's too. That is how a threshold learns it may come down.

Markers are signed: metadata `sy_cache_check` holds an HMAC (the internal token) of tenant,
request id, tier, entry id and similarity, so fields a Kafka producer wrote never count.

Two answers agree when equal once normalised (NFKC, case, white space, end punctuation), or when
their word sequences are at least SY_CACHE_SHADOW_AGREEMENT similar (difflib) and hold the same
numbers: free text rarely repeats word for word, a wrong number is the commonest false hit.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import hmac
import random
import re
import secrets
import time
import unicodedata
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from prometheus_client import Counter, Gauge
from switchyard.v1.envelope_pb2 import CacheInfo, Response

from shared.cache_rules import NO_STORE
from shared.runtime.envelope import DependencyUnavailable, Envelope
from shared.runtime.stage import CACHE_SHADOW_TIER
from shared.runtime.telemetry import get_logger

from .budget import BudgetBook, wilson
from .store import CacheStore

log = get_logger(__name__)

Write = Callable[[Callable[[], Any]], Awaitable[Any]]  # runs a blocking Milvus write (lookup.py)

SHADOW = CACHE_SHADOW_TIER
EXPLORE = "explore"
MAC_KEY = "sy_cache_check"
WINDOW = 1000  # the false-hit estimate is over each tenant's most recent shadow checks

SENT = Counter(
    "sy_cache_shadow_sent_total", "Semantic hits also sent to the engine (shadow mode)", ["tenant"]
)
CHECKS = Counter(
    "sy_cache_shadow_checks_total", "Shadow answers compared with the served (stored) answer", ["tenant"]
)
DISAGREEMENTS = Counter(
    "sy_cache_shadow_disagreements_total", "Shadow checks where the engine's answer differed", ["tenant"]
)
FALSE_HITS = Gauge(
    "sy_cache_false_hit_ratio", "Share of semantic hits found wrong (last 1,000 shadow checks)", ["tenant"]
)
FALSE_HITS_LOWER = Gauge(
    "sy_cache_false_hit_ratio_lower", "Wilson 95% lower bound of sy_cache_false_hit_ratio", ["tenant"]
)
FALSE_HITS_UPPER = Gauge(
    "sy_cache_false_hit_ratio_upper", "Wilson 95% upper bound of sy_cache_false_hit_ratio", ["tenant"]
)

_WS = re.compile(r"\s+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


@dataclass(frozen=True, slots=True)
class Check:
    """What a marked reply checks: the entry, at which similarity, as a shadow or an exploration."""

    kind: str  # SHADOW | EXPLORE
    entry_id: str
    similarity: float


def normalise(text: str) -> str:
    text = _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return text.rstrip(" .!?;:")


def answer_of(resp: Response) -> str:
    return "\n".join(c.text for c in resp.choices)


def agree(stored: str, fresh: str, min_ratio: float) -> bool:
    """Do the stored answer and the engine's fresh one say the same (module docstring)?"""
    a, b = normalise(stored), normalise(fresh)
    if a == b:
        return True
    if min_ratio >= 1.0 or sorted(_NUMBER.findall(a)) != sorted(_NUMBER.findall(b)):
        return False
    return difflib.SequenceMatcher(None, a.split(), b.split(), autojunk=False).ratio() >= min_ratio


class Marker:
    """Signs and reads the check markers (CacheInfo + the MAC in metadata)."""

    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(b"sy-cache-check\x00" + secret.encode()).digest()

    def _mac(self, env: Envelope) -> str:
        c = env.cache
        msg = f"{env.tenant}\x00{env.request_id}\x00{c.tier}\x00{c.entry_id}\x00{c.similarity:.6f}"
        return hmac.new(self._key, msg.encode(), hashlib.sha256).hexdigest()[:32]

    def mark(self, env: Envelope, kind: str, entry_id: str, similarity: float) -> None:
        env.cache.CopyFrom(CacheInfo(hit=False, tier=kind, entry_id=entry_id, similarity=similarity))
        env.metadata[MAC_KEY] = self._mac(env)

    def read(self, env: Envelope) -> Check | None:
        """The check a reply carries, or None (no marker, or one the cache did not sign)."""
        c = env.cache
        if c.tier not in (SHADOW, EXPLORE) or not c.entry_id:
            return None
        if not hmac.compare_digest(env.metadata.get(MAC_KEY, ""), self._mac(env)):
            return None
        return Check(c.tier, c.entry_id, float(c.similarity))

    @staticmethod
    def strip(env: Envelope) -> None:
        """A request entering the cache carries no marker of anyone else's."""
        if env.cache.tier in (SHADOW, EXPLORE):
            env.ClearField("cache")
        if MAC_KEY in env.metadata:
            del env.metadata[MAC_KEY]


def shadow_id(request_id: str) -> str:
    """A request id of the shadow's own (the gateway waits on the original one only)."""
    return f"{request_id[:100]}:shadow:{secrets.token_hex(4)}"


def shadow_request(env: Envelope, entry_id: str, similarity: float, marker: Marker) -> Envelope:
    """The hit's request again, for the engine: only what generation needs (small records: the
    embedded broker keeps every record in memory), not streamed, never stored."""
    out = Envelope(
        request_id=shadow_id(env.request_id),
        tenant=env.tenant,
        kind=env.kind,
        model=env.model,
        adapter=env.adapter,
        request=env.request,
        media=env.media,
        priority=env.priority,
        deadline_unix_ms=env.deadline_unix_ms,
        created_unix_ns=time.time_ns(),
    )
    if env.HasField("adapter_ref"):
        out.adapter_ref.CopyFrom(env.adapter_ref)
    out.request.sampling.stream = False
    out.metadata[NO_STORE] = "1"
    marker.mark(out, SHADOW, entry_id, similarity)
    return out


class FalseHitMeter:
    """Per tenant: the shadow checks' outcomes, exported as counters and a Wilson-bounded estimate."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._recent: dict[str, deque[bool]] = {}  # tenant -> wrong? of the latest checks
        self.totals: dict[str, list[int]] = {}  # tenant -> [checks, disagreements] since start

    def sent(self, tenant: str) -> None:
        SENT.labels(tenant).inc()

    def observe(self, tenant: str, wrong: bool) -> None:
        CHECKS.labels(tenant).inc()
        if wrong:
            DISAGREEMENTS.labels(tenant).inc()
        total = self.totals.setdefault(tenant, [0, 0])
        total[0] += 1
        total[1] += int(wrong)
        recent = self._recent.setdefault(tenant, deque(maxlen=self.window))
        recent.append(wrong)
        est, lo, hi = wilson(sum(recent), len(recent))
        FALSE_HITS.labels(tenant).set(est)
        FALSE_HITS_LOWER.labels(tenant).set(lo)
        FALSE_HITS_UPPER.labels(tenant).set(hi)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per tenant: checks and disagreements since start, the recent estimate and its interval."""
        out: dict[str, dict[str, float]] = {}
        for tenant, recent in self._recent.items():
            est, lo, hi = wilson(sum(recent), len(recent))
            checks, wrong = self.totals[tenant]
            out[tenant] = {
                "checks": checks,
                "disagreements": wrong,
                "estimate": est,
                "lower": lo,
                "upper": hi,
            }
        return out


class Sampler:
    """Which hits are shadowed and which misses explore: a share `rate` of each (0: none)."""

    def __init__(self, rate: float, rng: random.Random | None = None) -> None:
        self.rate = rate
        self._rng = rng or random.Random()

    def __call__(self) -> bool:
        return self.rate > 0 and self._rng.random() < self.rate


class Checks:
    """What the budget learns from: the markers, the sampling, the meter and this replica's view
    of entries' outcomes (`book`); `on_reply` judges a marked answer from sy.responses."""

    def __init__(
        self,
        secret: str,
        rate: float,
        agreement: float = 0.9,
        rng: random.Random | None = None,
        book: BudgetBook | None = None,
    ) -> None:
        self.marker, self.sample, self.agreement = Marker(secret), Sampler(rate, rng), agreement
        self.meter = FalseHitMeter()
        self.book = book if book is not None else BudgetBook()
        self.counts = dict.fromkeys(
            (
                "shadows",  # shadow requests sent
                "shadow_checks",  # ... whose answers were judged
                "shadow_disagreements",
                "explored",  # misses sent on with a candidate to check
                "explore_checks",
                "explore_disagreements",
                "unjudged",  # marked answers not judged: an error reply, the entry gone, other weights
            ),
            0,
        )

    def shadow(self, env: Envelope, entry_id: str, similarity: float) -> Envelope:
        """The shadow request of a hit about to be served (built before the reply replaces it)."""
        self.counts["shadows"] += 1
        self.meter.sent(env.tenant)
        return shadow_request(env, entry_id, similarity, self.marker)

    def explore(self, env: Envelope, entry_id: str, similarity: float) -> None:
        """Mark a miss so that its answer is compared with the refused candidate's."""
        self.counts["explored"] += 1
        self.marker.mark(env, EXPLORE, entry_id, similarity)

    async def on_reply(self, env: Envelope, store: CacheStore, write: Write) -> str | None:
        """Judge a marked answer; "shadow" when it must not be stored (a shadow's), else None."""
        check = self.marker.read(env)
        keep_out = SHADOW if env.cache.tier == SHADOW else None  # signed or not: never stored
        if check is None:
            return keep_out
        try:
            why = await self._judge(env, check, store, write)
        except DependencyUnavailable:
            raise  # Milvus is down: the write-back waits for it, as for storing
        except Exception as exc:  # noqa: BLE001 - a failed check never costs the entry its store
            why = f"error: {exc!r}"[:200]
        if why:
            self.counts["unjudged"] += 1
            log.info("cache check not judged", reason=why, kind=check.kind, entry_id=check.entry_id)
        return keep_out

    async def _judge(self, env: Envelope, check: Check, store: CacheStore, write: Write) -> str:
        if env.error.code or not env.response.choices:
            return "no_answer"
        entry = await asyncio.to_thread(store.get, check.entry_id, env.tenant)
        if entry is None:
            return "entry_gone"
        fresh = env.response.model_version
        if entry.model_version and fresh and fresh != entry.model_version:
            return "model_version"  # other weights answered: no verdict on the reuse
        stored = answer_of(Response.FromString(entry.response))
        correct = agree(stored, answer_of(env.response), self.agreement)
        if store.has_stats:
            stats = await write(partial(store.record, entry.id, env.tenant, check.similarity, correct))
            if stats is None:
                return "entry_gone"
        else:  # a collection from before the `stats` field: this replica's memory only
            stats = self.book.view(entry.id, entry.stats).add(check.similarity, correct)
        self.book.put(entry.id, stats)
        self.counts[f"{check.kind}_checks"] += 1
        if check.kind == SHADOW:
            self.meter.observe(env.tenant, not correct)
        if not correct:
            self.counts[f"{check.kind}_disagreements"] += 1
            log.info(
                "cache check: the engine disagreed with the entry",
                kind=check.kind,
                entry_id=entry.id,
                similarity=round(check.similarity, 4),
                outcomes=stats.n,
            )
        return ""

    def summary(self) -> dict[str, object]:
        """The cache API's view: counts, and the false-hit estimate per tenant."""
        return {**self.counts, "tenants": self.meter.summary()}
