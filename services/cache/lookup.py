"""The cache stage's logic: lookup (exact, then semantic + verifier), write-back, invalidation.

No Kafka here: stage.py feeds it envelopes. Milvus calls are blocking gRPC and run in threads.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

from switchyard.v1.envelope_pb2 import Response
from switchyard.v1.events_pb2 import AdapterEvent, Heartbeat

from shared.cache_rules import has_media
from shared.runtime.envelope import Envelope
from shared.runtime.telemetry import add_timing

from .budget import threshold
from .embed import BatchingEmbedder
from .front import ExactFront
from .keys import CacheKey, cache_key, entry_id
from .pairmodel import PairModel
from .policy import CachePolicy
from .shadow import Checks
from .store import CacheStore, Entry, Purge, now_ms
from .verify import Verdict, Verifier
from .versions import LiveVersions

T = TypeVar("T")

PEEKED_KEEP_S = 60.0  # how long a peek's lookup stands in for the same request's own
PEEKED_MAX = 10_000


@dataclass(slots=True)
class Outcome:
    hit: bool
    tier: str = ""  # exact | semantic
    entry: Entry | None = None
    # why a miss: bypass reason, "no_candidate", "below_floor", "below_threshold" (a learned one),
    # verifier reason
    reason: str = ""
    similarity: float = 0.0
    shadow: bool = False  # a semantic hit sampled for a shadow check (whoever answers sends it)
    explore: tuple[str, float] | None = None  # a miss sampled to check this candidate (id, similarity)
    timings: list[tuple[str, int, int, dict[str, object]]] = field(default_factory=list)


@dataclass
class Stats:
    lookups: int = 0
    hits_exact: int = 0
    hits_semantic: int = 0
    bypassed: int = 0
    rejected_by_verifier: int = 0
    stored: int = 0
    peeks: int = 0  # lookups the gateway asked for over HTTP (each is its request's lookup)
    peek_hits: int = 0
    front_hits: int = 0  # exact hits (lookups and peeks) answered from memory, without Milvus
    invalidated: int = 0
    swept: int = 0
    lookup_ms: deque[float] = field(default_factory=lambda: deque(maxlen=2048))  # recent lookups

    def summary(self) -> dict[str, object]:
        """Counters plus hit rate by tier and recent lookup latency (the cache API's stats)."""
        lat = sorted(self.lookup_ms)

        def pct(q: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None

        served = max(self.lookups - self.bypassed, 1)
        out: dict[str, object] = {k: v for k, v in vars(self).items() if k != "lookup_ms"}
        out["hit_rate"] = {
            "exact": self.hits_exact / served,
            "semantic": self.hits_semantic / served,
            "all": (self.hits_exact + self.hits_semantic) / served,
        }
        out["lookup_ms"] = {"p50": pct(0.5), "p99": pct(0.99), "window": len(lat)}
        return out


class SemanticCache:
    def __init__(
        self,
        store: CacheStore,
        embedder: BatchingEmbedder,
        policy: CachePolicy,
        verifier: Verifier | None = None,
        top_k: int = 5,
        versions: LiveVersions | None = None,
        front: ExactFront | None = None,
        checks: Checks | None = None,
        pair_model: PairModel | None = None,
    ) -> None:
        self.store, self.embedder, self.policy = store, embedder, policy
        self.pair_model = pair_model  # the learned review of the verifier's verdict (pairmodel.py)
        self.checks = checks if checks is not None else Checks("", 0.0)  # 0: no shadows, no learning
        self.front = front if front is not None else ExactFront()
        self.verifier = verifier or Verifier()
        self.top_k = top_k
        self.versions = versions or LiveVersions()
        self.stats = Stats()
        # (tenant, request id) -> (when, exact key, the peek's lookup): for the stage's lookup.
        self._peeked: OrderedDict[tuple[str, str], tuple[float, str, asyncio.Future[Outcome | None]]] = (
            OrderedDict()
        )
        # Concurrent writes all wait for the same next tick: 8 threads ≈ 40 write-backs/s.
        self._writer = ThreadPoolExecutor(max_workers=8, thread_name_prefix="cache-write")

    async def lookup(self, env: Envelope, at_ms: int | None = None) -> Outcome:
        """The stage's lookup: the gateway's peek at this very request when there was one here
        (awaited if it is still running: a request is never looked up twice), else its own."""
        t_start = time.perf_counter()
        try:
            why = self.policy.bypass(env)
            if why:
                self.stats.lookups += 1
                self.stats.bypassed += 1
                return Outcome(False, reason=why)
            key = cache_key(env)
            pending = self._recall(env, key)
            if pending is not None:
                t0 = time.time_ns()
                found = await asyncio.shield(pending)
                if found is not None and not (found.entry is not None and found.entry.expires_ms <= now_ms()):
                    attrs: dict[str, object] = {"tier": found.tier} if found.hit else {"reason": found.reason}
                    # Counted when the peek looked; its own rows describe work done before the
                    # request was produced, so the stage shows only its wait for them.
                    # The peek's handler sent its shadow already.
                    rows = [("cache_from_peek", t0, time.time_ns(), attrs)]
                    return replace(found, timings=rows, shadow=False)
            out = await self._find(env, key, at_ms)
            self._count(out)
            return out
        finally:
            self.stats.lookup_ms.append((time.perf_counter() - t_start) * 1000)

    async def peek(self, env: Envelope, at_ms: int | None = None) -> Outcome:
        """The gateway's peek (api.py): the request's whole lookup, asked over HTTP before the
        request is produced. It is the request's lookup in the stats (a hit within the gateway's
        hold never reaches the stage); the stage takes its outcome instead of looking again."""
        self.stats.peeks += 1
        why = self.policy.bypass(env)
        if why:
            return Outcome(False, reason=why)
        if has_media(env):
            return Outcome(False, reason="media")
        key = cache_key(env)
        found: asyncio.Future[Outcome | None] = asyncio.get_running_loop().create_future()
        self._remember(env, key, found)
        try:
            out = await self._find(env, key, at_ms)
        except BaseException:
            found.set_result(None)  # the stage looks for itself
            raise
        found.set_result(out)
        self._count(out)
        if out.hit:
            self.stats.peek_hits += 1
        return out

    def _count(self, out: Outcome) -> None:
        """One count per request: by the peek that looked, else by the stage's own lookup."""
        self.stats.lookups += 1
        if out.hit:
            if out.tier == "exact":
                self.stats.hits_exact += 1
            else:
                self.stats.hits_semantic += 1
        elif out.reason.startswith("verifier:"):
            self.stats.rejected_by_verifier += 1

    async def _find(self, env: Envelope, key: CacheKey, at_ms: int | None) -> Outcome:
        """Exact tier (memory, then Milvus), then the semantic tier and the verifier; no stats.

        Milvus' exact tier is read from the semantic search's candidates, not asked by a query of
        its own: an entry of the same exact key has the same scope and the same embedded text, so
        the same vector (cosine 1.0), and comes back first. The separate exact query ran beside the
        embedding on the same two cores and slowed it by as much as it took (a 3 ms embedding
        ended 5.7 ms into the lookup; lookup p99 11.7 ms at 100k entries, docs/cache.md), for the few
        lookups that are exact hits outside the front."""
        live = self.versions.live(env.model)
        out = Outcome(False)
        t0 = time.time_ns()
        exact = self._from_front(key, live, at_ms)
        out.timings.append(("cache_exact", t0, time.time_ns(), {"front": exact is not None}))
        if exact is not None:
            out.hit, out.tier, out.entry, out.similarity = True, "exact", exact, 1.0
            return out
        generation = self.front.generation
        vec = await self.embedder.embed(key.text)
        t2 = time.time_ns()
        out.timings.append(("cache_embed", t0, t2, {"batch": self.embedder.last_batch_size}))
        cands = await asyncio.to_thread(self.store.search, key, vec, self.top_k, at_ms, live)
        t3 = time.time_ns()
        exact = next((c for c in cands if c.exact_key == key.exact), None)
        out.timings.append(("cache_search", t2, t3, {"candidates": len(cands), "exact": exact is not None}))
        if exact is not None:
            exact.similarity = 1.0
            self.front.put(key.tenant, key.exact, exact, generation)  # unless an invalidation came
            out.hit, out.tier, out.entry, out.similarity = True, "exact", exact, 1.0
            return out
        above = [c for c in cands if c.similarity >= self.policy.lowest_for(env.tenant)]
        out.reason = "no_candidate" if not cands else "below_floor" if not above else ""
        out.similarity = cands[0].similarity if cands else 0.0
        checked = self._choose(env.tenant, key, above, out)
        if checked:
            out.timings.append(("cache_verify", t3, time.time_ns(), {"checked": checked, "ok": out.hit}))
        return out

    def _choose(self, tenant: str, key: CacheKey, above: list[Entry], out: Outcome) -> int:
        """The most similar candidate within its own threshold (budget.py) that the verifier
        passes; a miss may explore the first one the verifier passes but its threshold refused.
        Returns how many candidates the verifier read."""
        prior, lowest, target = (
            self.policy.floor_for(tenant),
            self.policy.lowest_for(tenant),
            self.policy.target_for(tenant),
        )
        refused, checked, exploring = "", 0, None
        for c in above:
            t = threshold(self.checks.book.view(c.id, c.stats), prior, lowest, target)
            if not t.accepts(c.similarity):
                refused = refused or ("below_threshold" if t.learned else "below_floor")
                if exploring is None:
                    exploring = self.checks.sample()  # one draw per lookup
                if exploring and out.explore is None:
                    checked += 1
                    if self._verify(key.text, c.prompt, c.similarity).ok:
                        out.explore = (c.id, c.similarity)
                continue
            checked += 1
            v = self._verify(key.text, c.prompt, c.similarity)
            if v.ok:
                out.hit, out.tier, out.entry, out.similarity, out.reason = (
                    True,
                    "semantic",
                    c,
                    c.similarity,
                    "",
                )
                out.explore = None
                out.shadow = self.checks.sample()
                return checked
            out.reason = f"verifier:{v.reason}"
        out.reason = out.reason or refused
        return checked

    def _verify(self, new: str, old: str, similarity: float) -> Verdict:
        """The verifier's verdict, reviewed by the pair model where one is loaded: it vetoes
        passes it doubts and serves only new-words refusals it is sure of."""
        v = self.verifier.check(new, old, similarity)
        return v if self.pair_model is None else self.pair_model.review(new, old, similarity, v)

    def _from_front(self, key: CacheKey, live: frozenset[str], at_ms: int | None) -> Entry | None:
        hit = self.front.get(key.tenant, key.exact, live, at_ms)
        if hit is not None:
            self.stats.front_hits += 1
        return hit

    def _remember(self, env: Envelope, key: CacheKey, found: asyncio.Future[Outcome | None]) -> None:
        """The peek's lookup (running or done), for the same request's stage lookup when it comes
        through the pipeline (in this replica: the usual case with one; another simply looks again)."""
        now = time.monotonic()
        self._peeked[(env.tenant, env.request_id)] = (now, key.exact, found)
        while self._peeked:
            oldest = next(iter(self._peeked.values()))
            if len(self._peeked) <= PEEKED_MAX and now - oldest[0] <= PEEKED_KEEP_S:
                break
            self._peeked.popitem(last=False)

    def _recall(self, env: Envelope, key: CacheKey) -> asyncio.Future[Outcome | None] | None:
        """The peek's lookup of this very request (same id, same content) if there was one lately."""
        got = self._peeked.pop((env.tenant, env.request_id), None)
        if got is None or got[1] != key.exact or time.monotonic() - got[0] > PEEKED_KEEP_S:
            return None
        return got[2]

    @staticmethod
    def apply_hit(env: Envelope, out: Outcome, parent: str = "cache") -> Envelope:
        """Turn the request into its reply: the stored response, cache info, child timing rows."""
        assert out.entry is not None
        env.response.CopyFrom(Response.FromString(out.entry.response))
        env.cache.hit, env.cache.tier = True, out.tier
        env.cache.similarity, env.cache.entry_id = out.similarity, out.entry.id
        annotate(env, out, parent)
        return env

    async def _write(self, call: Callable[[], T]) -> T:
        """Writes wait for Milvus' time tick (~0.2 s, store.py): on threads of their own, so a
        burst of write-backs never holds the threads the lookups run their queries on."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, call)

    async def write_back(self, env: Envelope, at_ms: int | None = None) -> str | None:
        """Store a completed miss; returns why not ("duplicate": this request id has an entry), or None.

        Milvus down raises DependencyUnavailable (store.py): the write-back stage waits for it and
        then stores the entry (a redelivery is deduped by the request id) rather than dropping it.
        A checked answer (shadow.py) is judged first; a shadow's is never stored."""
        why = await self.checks.on_reply(env, self.store, self._write)
        if why:
            return why
        why = self.policy.storable(env)
        if why:
            return why
        key = cache_key(env)
        vec = await self.embedder.embed(key.text)
        resp = Response()
        resp.CopyFrom(env.response)
        at = now_ms() if at_ms is None else at_ms
        entry = Entry(
            id=entry_id(env.tenant, env.request_id),
            prompt=key.text[:2000],
            response=resp.SerializeToString(),
            request_id=env.request_id,
            expires_ms=at + int(self.policy.ttl_s * 1000),
            model=key.model,
            adapter=key.adapter,
            model_version=env.response.model_version[:64],
        )
        generation = self.front.generation
        fresh = await self._write(
            partial(
                self.store.put,
                key,
                vec,
                entry_id=entry.id,
                request_id=env.request_id,
                response=entry.response,
                ttl_s=self.policy.ttl_s,
                at_ms=at,
                model_version=entry.model_version,
            )
        )
        if not fresh:
            return "duplicate"
        self.front.put(key.tenant, key.exact, entry, generation)  # visible in Milvus too: put waited
        self.stats.stored += 1
        return None

    async def purge(self, purge: Purge, milvus: bool = True) -> int:
        """Remove matching entries from the front and (unless another replica already did) Milvus.

        The front is dropped before and after the Milvus delete: a lookup whose query was out while
        the delete ran could otherwise put back what it removed (fills check the generation)."""
        n = self.front.drop(purge)
        if not milvus:
            return n
        n = await self._write(partial(self.store.delete, purge))
        self.front.drop(purge)
        return n

    async def on_adapter_event(self, ev: AdapterEvent) -> int:
        """Entries of deleted or no-longer-live adapter versions go."""
        live = [f"{ev.name}@{v.version}" for v in ev.versions]
        if ev.type == AdapterEvent.TYPE_VERSION_DELETED and ev.version:
            n = await self.purge(Purge(adapter=f"{ev.name}@{ev.version}"))
        elif ev.type == AdapterEvent.TYPE_DELETED or not live:
            n = await self.purge(Purge(adapter_name=ev.name))
        else:  # published / alias moved / resync: drop versions that are no longer live
            n = await self.purge(Purge(adapter_name=ev.name, keep_adapters=tuple(live)))
        self.stats.invalidated += n
        return n

    async def on_heartbeat(self, hb: Heartbeat, now: float | None = None) -> int:
        """A model's live weights versions changed: entries of the others go (model version change)."""
        self.versions.observe(hb)
        return await self.prune_versions(now)

    async def prune_versions(self, now: float | None = None) -> int:
        n = 0
        for model, live in self.versions.changes(now).items():
            n += await self.purge(Purge(model=model, keep_model_versions=tuple(sorted(live))))
        self.stats.invalidated += n
        return n

    async def sweep(self) -> int:
        n = await self.purge(Purge(expired_at_ms=now_ms()))
        self.stats.swept += n
        return n


def annotate(env: Envelope, out: Outcome, parent: str = "cache") -> None:
    for stage, start, end, attrs in out.timings:
        add_timing(env, stage, start, end, parent=parent, **attrs)
