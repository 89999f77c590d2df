"""The exact tier's in-memory front: recent exact entries of this replica, in front of Milvus.

Why: an exact hit is a key lookup, yet asked of Milvus it costs a round trip (2 ms on an idle
host, 7-9 ms in the stack where Milvus shares cores with the broker and the services), which was a
third of a peek-answered hit's end-to-end time. The front holds what this replica wrote back and
what its searches found by exact key, so a repeat is answered from memory; anything not here
(another replica's write-back, an entry from before a restart) is found in Milvus, which stays
the source of truth (lookup.py: the exact key among the semantic search's candidates).

It never serves what Milvus would not: every read checks expiry and the live model versions as
the Milvus filter does, and every invalidation (TTL sweep, adapter events, model version change,
the purge API, a purge made through another replica: `CachePurge` on sy.cache.purges) drops the
matching entries with the same predicate as the Milvus delete. A fill races an invalidation that
lands while its Milvus search is out: fills carry the generation they started at and are refused
when any invalidation came in between.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

from .store import Entry, Purge, now_ms


class ExactFront:
    """LRU of (tenant, exact key) -> Entry, at most `capacity` entries (0: off)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str], Entry] = OrderedDict()
        self.generation = 0  # bumped by every invalidation
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(
        self, tenant: str, exact: str, versions: Collection[str] = (), at_ms: int | None = None
    ) -> Entry | None:
        """The entry Milvus would return for this exact key (same expiry and model-version rules), or None."""
        k = (tenant, exact)
        e = self._entries.get(k)
        if e is None:
            return None
        if e.expires_ms <= (now_ms() if at_ms is None else at_ms):
            del self._entries[k]
            return None
        if versions and e.model_version not in versions:
            return None  # kept: the version may be live again (a rollback) before the prune
        self._entries.move_to_end(k)
        return e

    def put(self, tenant: str, exact: str, entry: Entry, generation: int) -> bool:
        """Remember an entry read from or written to Milvus since `generation` was read; refused
        (False) when an invalidation came in meanwhile: the entry may be one it removed."""
        if self.capacity <= 0 or generation != self.generation:
            return False
        self._entries[(tenant, exact)] = entry
        self._entries.move_to_end((tenant, exact))
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
            self.evicted += 1
        return True

    def drop(self, purge: Purge) -> int:
        """Remove the entries the purge matches; returns how many."""
        self.generation += 1
        gone = [k for k, e in self._entries.items() if purge.matches(k[0], e)]
        for k in gone:
            del self._entries[k]
        return len(gone)
