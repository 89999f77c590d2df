"""The cache entries in Milvus (pymilvus `MilvusClient`); no Kafka, no policy.

One collection, partition key `tenant`; scalar scope fields (model, adapter@version,
context/media/params hashes), the exact-key hash, insert and expiry times; an HNSW index on
the 384-d MiniLM vectors (cosine). Filter values are escaped here (pymilvus' filter templates
failed against the 2.3 server).

Consistency: lookups read "Eventually" and never wait. A Session read waits for the server's next
time tick whenever this process wrote since its last read (pymilvus keeps the last write's
timestamp per collection for the whole process): measured 193 ms for the first read after an
insert vs 2 ms, so with Session every lookup that followed a write-back paid ~0.2 s. The write
path pays it instead: `put` ends with a Session read, so an entry is visible to every lookup
once `put` returns (and the next `put`'s duplicate check sees it); deletes end with a Strong read.

Outages (issue 32): every call raises DependencyUnavailable("milvus") when Milvus cannot be
reached or is not serving (see `milvus_down`), so the stage's bus waits rather than dead-letters;
the callers decide (a lookup is served as a miss, a write-back waits). Other errors (a missing
collection, a bad filter) keep pymilvus' MilvusException.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pymilvus import DataType, MilvusClient

from .budget import EntryStats
from .embed import DIM
from .keys import CacheKey
from .milvus_errors import milvus_down
from .milvus_errors import outages as _outages

__all__ = ["CacheStore", "Entry", "Purge", "milvus_down", "now_ms"]

SCOPE_FIELDS = ("tenant", "model", "adapter", "context_hash", "media_hash", "params_hash")
OUT_FIELDS = [
    "id",
    "prompt",
    "response",
    "request_id",
    "expires_ms",
    "adapter",
    "model",
    "model_version",
    "exact_key",
]
STATS_FIELD = "stats"  # the entry's checked reuses (budget.py), "" = none yet
STATS_MAX = 32768  # 1,001 bins of "bin:correct:wrong," at most 21 characters each
# Every field of a row, to write it again (a stats rewrite)
ROW_FIELDS = ["id", *SCOPE_FIELDS, "model_version", "exact_key", "request_id", "prompt", "response"]
ROW_FIELDS += ["created_ms", "expires_ms", STATS_FIELD, "vector"]
CONSISTENCY = "Eventually"  # lookups and counts: never wait for a time tick
WRITE_CONSISTENCY = "Session"  # the write path's reads: see this process' own inserts


def lit(s: str) -> str:
    """A Milvus filter string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Purge:
    """Which entries an invalidation removes: every given field must match. One description for
    both copies: `filter()` for the Milvus delete, `matches()` for the in-memory front."""

    tenant: str | None = None
    model: str | None = None
    adapter: str | None = None
    adapter_name: str | None = None
    keep_adapters: tuple[str, ...] = ()
    keep_model_versions: tuple[str, ...] = ()
    entry_id: str | None = None
    expired_at_ms: int | None = None  # the sweeper: entries expired by then

    def matches(self, tenant: str, e: Entry) -> bool:
        if self.tenant is not None and tenant != self.tenant:
            return False
        if self.model is not None and e.model != self.model:
            return False
        if self.adapter is not None and e.adapter != self.adapter:
            return False
        if self.adapter_name is not None:
            if not e.adapter.startswith(self.adapter_name + "@") or e.adapter in self.keep_adapters:
                return False
        if self.keep_model_versions and e.model_version in self.keep_model_versions:
            return False
        if self.entry_id is not None and e.id != self.entry_id:
            return False
        return self.expired_at_ms is None or e.expires_ms <= self.expired_at_ms

    def filter(self) -> str:
        """The Milvus filter expression of the same predicate."""
        parts = []
        if self.tenant is not None:
            parts.append(f"tenant == {lit(self.tenant)}")
        if self.model is not None:
            parts.append(f"model == {lit(self.model)}")
        if self.adapter is not None:
            parts.append(f"adapter == {lit(self.adapter)}")
        if self.adapter_name is not None:
            parts.append(f"adapter like {lit(self.adapter_name.replace('%', '') + '@%')}")
            if self.keep_adapters:
                parts.append(f"adapter not in [{', '.join(lit(a) for a in self.keep_adapters)}]")
        if self.keep_model_versions:
            parts.append(f"model_version not in [{', '.join(lit(v) for v in self.keep_model_versions)}]")
        if self.entry_id is not None:
            parts.append(f"id == {lit(self.entry_id)}")
        if self.expired_at_ms is not None:
            parts.append(f"expires_ms <= {self.expired_at_ms}")
        if not parts:
            raise ValueError("a purge needs at least one field")
        return " and ".join(parts)


@dataclass(slots=True)
class Entry:
    id: str
    prompt: str
    response: bytes  # serialised switchyard.v1.Response
    request_id: str
    expires_ms: int
    similarity: float = 1.0
    model: str = ""
    adapter: str = ""  # name@version, "" for the base model
    model_version: str = ""
    exact_key: str = ""  # the exact tier's key of the request that wrote it
    stats: str = ""  # encoded EntryStats (budget.py)


class CacheStore:
    @_outages
    def __init__(
        self, uri: str, collection: str = "sy_cache", timeout_s: float = 10.0, partition_key: bool = True
    ) -> None:
        self.uri, self.collection, self.partition_key = uri, collection, partition_key
        self.client = MilvusClient(uri=uri, timeout=timeout_s)
        self.has_stats = True  # False on a collection created before the `stats` field
        self.out_fields = [*OUT_FIELDS, STATS_FIELD]
        self._rewrite = threading.Lock()  # a stats rewrite (delete + insert) never overlaps a delete

    # ------------------------------------------------------------------ schema
    @_outages
    def ensure(self) -> None:
        if self.client.has_collection(self.collection):
            fields = {f["name"] for f in self.client.describe_collection(self.collection)["fields"]}
            if "model_version" in fields:
                # Milvus 2.3 cannot add a field: a collection from before `stats` keeps serving, and
                # the outcomes of its entries' checks stay in the judging replica's memory.
                self.has_stats = STATS_FIELD in fields
                self.out_fields = [*OUT_FIELDS, STATS_FIELD] if self.has_stats else list(OUT_FIELDS)
                self.client.load_collection(self.collection)  # after a server restart it is unloaded
                return
            # A collection from before entries carried their model version: its answers cannot be
            # tied to weights any more, so it is dropped (a cache, not a record).
            self.client.drop_collection(self.collection)
        s = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        s.add_field("tenant", DataType.VARCHAR, max_length=64, is_partition_key=self.partition_key)
        for f, n in (("model", 256), ("adapter", 256), ("context_hash", 32), ("media_hash", 32)):
            s.add_field(f, DataType.VARCHAR, max_length=n)
        s.add_field("params_hash", DataType.VARCHAR, max_length=32)
        s.add_field("model_version", DataType.VARCHAR, max_length=64)
        s.add_field("exact_key", DataType.VARCHAR, max_length=64)
        s.add_field("request_id", DataType.VARCHAR, max_length=128)
        s.add_field("prompt", DataType.VARCHAR, max_length=8192)
        s.add_field("response", DataType.VARCHAR, max_length=65535)  # hex of the Response proto
        s.add_field(STATS_FIELD, DataType.VARCHAR, max_length=STATS_MAX)
        s.add_field("created_ms", DataType.INT64)
        s.add_field("expires_ms", DataType.INT64)
        s.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
        idx = self.client.prepare_index_params()
        idx.add_index(
            "vector", index_type="HNSW", metric_type="COSINE", params={"M": 16, "efConstruction": 200}
        )
        self.client.create_collection(
            self.collection,
            schema=s,
            index_params=idx,
            consistency_level=WRITE_CONSISTENCY,
            **({"num_partitions": 16} if self.partition_key else {}),
        )
        self.client.load_collection(self.collection)

    @_outages
    def drop(self) -> None:
        self.client.drop_collection(self.collection)

    # ------------------------------------------------------------------ reads
    @staticmethod
    def _versions(versions: Sequence[str]) -> list[str]:
        return [f"model_version in [{', '.join(lit(v) for v in sorted(versions))}]"] if versions else []

    @classmethod
    def _scope_filter(cls, key: CacheKey, at_ms: int, versions: Sequence[str] = ()) -> str:
        sc = key.scope()
        parts = [f"{f} == {lit(sc[f])}" for f in SCOPE_FIELDS] + [f"expires_ms > {at_ms}"]
        return " and ".join(parts + cls._versions(versions))

    @_outages
    def search(
        self,
        key: CacheKey,
        vector: np.ndarray,
        k: int,
        at_ms: int | None = None,
        versions: Sequence[str] = (),
    ) -> list[Entry]:
        at = now_ms() if at_ms is None else at_ms
        res = self.client.search(
            self.collection,
            data=[vector.tolist()],
            anns_field="vector",
            filter=self._scope_filter(key, at, versions),
            limit=k,
            output_fields=self.out_fields,
            search_params={"metric_type": "COSINE", "params": {"ef": max(64, k)}},
            consistency_level=CONSISTENCY,
        )
        hits = res[0] if res else []
        return [_entry(h["entity"], float(h["distance"])) for h in hits]

    # ------------------------------------------------------------------ writes
    @_outages
    def put(
        self,
        key: CacheKey,
        vector: np.ndarray,
        *,
        entry_id: str,
        request_id: str,
        response: bytes,
        ttl_s: float,
        at_ms: int | None = None,
        model_version: str = "",
    ) -> bool:
        """Insert one entry; False when the request id already has one (a redelivered response)."""
        at = now_ms() if at_ms is None else at_ms
        row = dict(key.scope())
        row.update(
            id=entry_id,
            exact_key=key.exact,
            request_id=request_id[:128],
            prompt=key.text[:2000],
            response=response.hex(),
            created_ms=at,
            expires_ms=at + int(ttl_s * 1000),
            vector=vector.tolist(),
            model_version=model_version[:64],
        )
        if self.has_stats:
            row[STATS_FIELD] = ""
        # Insert, not upsert: Milvus 2.3.5's upsert puts rows of a partition-key collection where a
        # filter on the key does not find them. Dedupe by id instead (one entry per request id).
        if self._has(entry_id):
            return False
        self.client.insert(self.collection, [row])
        self._has(entry_id)  # waits for the tick that makes the insert visible to Eventually reads
        return True

    def _has(self, entry_id: str) -> bool:
        return bool(
            self.client.query(
                self.collection,
                filter=f"id == {lit(entry_id)}",
                output_fields=["id"],
                limit=1,
                consistency_level=WRITE_CONSISTENCY,
            )
        )

    @_outages
    def get(self, entry_id: str, tenant: str) -> Entry | None:
        """One entry by id, within its tenant (a check's stored answer)."""
        rows = self.client.query(
            self.collection,
            filter=f"id == {lit(entry_id)} and tenant == {lit(tenant)}",
            output_fields=self.out_fields,
            limit=1,
            consistency_level=CONSISTENCY,
        )
        return _entry(rows[0], 1.0) if rows else None

    @_outages
    def record(self, entry_id: str, tenant: str, similarity: float, correct: bool) -> EntryStats | None:
        """Add one checked reuse to the entry's `stats`; its new stats, or None when it is gone.

        Rewritten as delete + insert of the whole row (2.3.5's upsert hides partition-key rows
        from filters), under the lock every delete takes: a purge running meanwhile can never
        see its delete undone by the insert, since the row is read again after it."""
        with self._rewrite:
            rows = self.client.query(
                self.collection,
                filter=f"id == {lit(entry_id)} and tenant == {lit(tenant)}",
                output_fields=ROW_FIELDS,
                limit=1,
                consistency_level=WRITE_CONSISTENCY,
            )
            if not rows:
                return None
            row = dict(rows[0])
            stats = EntryStats.decode(str(row.get(STATS_FIELD) or "")).add(similarity, correct)
            row[STATS_FIELD] = stats.encode()
            row["vector"] = [float(x) for x in row["vector"]]
            self._delete_now(f"id == {lit(entry_id)}")
            self.client.insert(self.collection, [row])
            self._has(entry_id)  # visible to every lookup once this returns
            return stats

    @_outages
    def delete(self, purge: Purge) -> int:
        """Delete the entries the purge matches; returns how many were deleted."""
        return self._delete(purge.filter())

    def sweep(self, at_ms: int | None = None) -> int:
        """Delete expired entries (they are never served anyway: every read filters on expiry)."""
        return self.delete(Purge(expired_at_ms=now_ms() if at_ms is None else at_ms))

    def _delete(self, expr: str) -> int:
        with self._rewrite:
            return self._delete_now(expr)

    def _delete_now(self, expr: str) -> int:
        res = self.client.delete(self.collection, filter=expr)
        # Reads missed a fresh delete on the 2.3.5 server until one Strong read (~200 ms; deletes
        # are rare: invalidation, purge, the sweeper).
        self.client.query(
            self.collection, filter='id == ""', output_fields=["id"], limit=1, consistency_level="Strong"
        )
        n = res.get("delete_count", 0) if isinstance(res, dict) else len(res)
        return int(n)

    @_outages
    def count(self) -> int:
        rows = self.client.query(
            self.collection, filter="", output_fields=["count(*)"], consistency_level=CONSISTENCY
        )
        return int(rows[0]["count(*)"]) if rows else 0

    def close(self) -> None:
        self.client.close()


def _entry(row: dict[str, object], sim: float) -> Entry:
    return Entry(
        id=str(row["id"]),
        prompt=str(row["prompt"]),
        response=bytes.fromhex(str(row["response"])),
        request_id=str(row["request_id"]),
        expires_ms=int(row["expires_ms"]),  # type: ignore[call-overload]
        similarity=sim,
        model=str(row.get("model", "")),
        adapter=str(row.get("adapter", "")),
        model_version=str(row.get("model_version", "")),
        exact_key=str(row.get("exact_key", "")),
        stats=str(row.get(STATS_FIELD) or ""),
    )
