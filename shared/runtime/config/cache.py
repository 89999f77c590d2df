"""The Semantic cache section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from shared.runtime.config.base import CpuList, Section


class CacheSettings(Section):
    """The cache service: Milvus, the gateway's peek, similarity floors and the verifier, the embedder (docs/cache.md)."""

    title: ClassVar[str] = "Semantic cache"

    milvus_uri: str | None = Field(
        default=None,
        description="Milvus URI (http://host:19530); unset = the launcher starts embedded Milvus",
    )
    milvus_collection: str = Field(
        default="sy_cache",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,254}$",
        description="Collection of cache entries",
    )
    cache_enabled: bool = Field(default=True, description="Serve and store cache entries (off: pass-through)")
    cache_peek_url: str | None = Field(
        default=None,
        description="Cache service URL the gateway sends a cacheable request to for its lookup before producing it "
        "(unset: no peek)",
    )
    cache_peek_hold_ms: float = Field(
        default=50.0,
        ge=0,
        le=1000,
        description="How long the gateway waits for the peek (the request's cache lookup) before it produces "
        "the request: a hit within it is answered with no pipeline run; a miss goes on with the lookup done, "
        "which the cache stage reuses (0: produce at once, the peek as a hedged read)",
    )
    cache_peek_timeout_s: float = Field(
        default=0.5, gt=0, le=30, description="How long the gateway waits for a peek before it gives up on it"
    )
    cache_similarity_floor: float = Field(
        default=0.80, ge=0, le=1, description="Cosine floor for semantic candidates (then the verifier)"
    )
    cache_tenant_floors: dict[str, float] = Field(
        default_factory=dict, description='JSON map tenant -> similarity floor, e.g. {"acme": 0.9}'
    )
    cache_target_error: float = Field(
        default=0.01,
        gt=0,
        lt=1,
        description="Error budget: the false-hit rate each entry's learned threshold keeps its semantic "
        "reuses under (upper end of a Wilson 95% interval over the entry's checked reuses)",
    )
    cache_tenant_targets: dict[str, float] = Field(
        default_factory=dict, description='JSON map tenant -> target false-hit rate, e.g. {"acme": 0.005}'
    )
    cache_shadow_rate: float = Field(
        default=0.02,
        ge=0,
        le=1,
        description="Share of semantic hits also sent to the engine (shadow mode) and of misses near a "
        "refused candidate whose answer is compared with it; 0 = off (thresholds stay at the floors)",
    )
    cache_shadow_agreement: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="Two answers agree when equal once normalised, or when their word-level similarity "
        "reaches this and they hold the same numbers (1: normalised exact match only)",
    )
    cache_novel_floor: float = Field(
        default=0.85, ge=0, le=1, description="Verifier: similarity needed when content words differ"
    )
    cache_added_floor: float = Field(
        default=0.95,
        ge=0,
        le=1,
        description="Verifier: similarity needed when one side only adds content words (a constraint)",
    )
    cache_verify: bool = Field(
        default=True, description="Verify semantic candidates (numbers, negation, entities)"
    )
    cache_pair_model: bool = Field(
        default=True,
        description="Let the learned pair model (services/cache/pair_model.json, trained on the dev split) review "
        "the verifier's verdicts: it vetoes passes it doubts and serves new-words refusals it is sure of "
        "(needs SY_CACHE_VERIFY)",
    )
    cache_top_k: int = Field(default=5, ge=1, le=100, description="Semantic candidates fetched per lookup")
    cache_ttl_s: float = Field(default=86400.0, gt=0, description="Lifetime of a cache entry")
    cache_front_entries: int = Field(
        default=10_000,
        ge=0,
        description="Exact entries each cache replica keeps in memory in front of Milvus (0: every exact "
        "lookup asks Milvus); invalidations reach every replica's copy",
    )
    cache_sweep_interval_s: float = Field(
        default=60.0, gt=0, description="How often expired entries are deleted"
    )
    cache_sampled_tenants: list[str] = Field(
        default_factory=list, description="JSON list of tenants whose temperature>0 requests are cached too"
    )
    cache_skip_length_tenants: list[str] = Field(
        default_factory=list, description="JSON list of tenants whose length-cut answers are not stored"
    )
    cache_model_version_window_s: float = Field(
        default=30.0,
        gt=0,
        description="A model version reported by a worker heartbeat within this window is live (cache)",
    )
    cache_embed_max_batch: int = Field(default=32, ge=1, description="Prompts embedded in one batch")
    cache_embed_threads: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Threads of the in-process embedder. One: on cores shared with the engine, "
        "OpenMP threads wait for each other (2 threads: p99 231 ms vs 46 ms for one, measured)",
    )
    cache_embed_backend: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="In-process MiniLM runtime: onnx (ONNX Runtime, exported once under the models dir; "
        "same vectors, ~2.5x faster per prompt on one core) or torch (sentence-transformers)",
    )
    cache_embed_window_ms: float = Field(
        default=0.0,
        ge=0,
        description="How long a batch waits for more prompts to embed; 0: none (what arrives while one "
        "batch runs forms the next)",
    )
    cache_embed_cpus: CpuList | None = Field(
        default=None,
        description="Set by the launcher where it pins the services: the cores the cache's embedding thread "
        "runs on (every core, as Milvus: on the services' shared core a prompt took ~4x longer)",
    )
    cache_embed_recent: int = Field(
        default=4096,
        ge=0,
        description="Vectors of the most recent prompts kept (a miss's write-back reuses its lookup's); 0 = none",
    )
    cache_embed_triton_url: str | None = Field(
        default=None,
        description="Triton gRPC host:port whose all-minilm-l6-v2 embeds cache prompts; unset = in-process",
    )
