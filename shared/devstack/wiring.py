"""What `switchyard up` starts and how it wires each child, declared as data.

The launcher (shared/devstack/launcher.py) runs processes; this module says which services exist,
when each runs, and which SY_* variables each child gets from the stack the launcher started
(embedded broker, Milvus, Triton, the ports of the services started before it). Reading the
tables below answers "where does the gateway get SY_CACHE_PEEK_URL from?" without reading the
launcher's process code. The endpoints file the launcher writes (var/run/endpoints.json) is the
`Endpoints` model at the bottom: the CLI commands read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from shared.runtime.config import Settings
from shared.runtime.cpus import format_cpus
from shared.runtime.production import DEFAULT_API_KEY


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the design: when `switchyard up` runs it, and how it is stopped."""

    name: str
    # Whether the settings call for it (None: always); a service left out is not started.
    runs_when: Callable[[Settings], bool] | None = None
    # Takes requests in from outside: stopped (drained) before the stages behind it.
    ingress: bool = False
    # The pool engine it runs (the canary asks for a model some started worker serves).
    engine: str | None = None


# Every service of the design, in start order; those whose module does not exist yet are skipped.
SERVICE_SPECS: tuple[ServiceSpec, ...] = (
    ServiceSpec("registry"),
    ServiceSpec("preprocess"),
    # Preprocess routes past the cache when it is off: an idle consumer costs CPU.
    ServiceSpec("cache", runs_when=lambda s: s.cache_enabled),
    ServiceSpec("router"),
    ServiceSpec("vllm_worker", engine="vllm"),
    # Only with a Triton pool configured.
    ServiceSpec(
        "triton_worker", engine="triton", runs_when=lambda s: any(p.engine == "triton" for p in s.pools)
    ),
    ServiceSpec("reward"),
    ServiceSpec("batch", ingress=True),
    ServiceSpec("gateway", ingress=True),
)
SPECS: dict[str, ServiceSpec] = {s.name: s for s in SERVICE_SPECS}
SERVICES: tuple[str, ...] = tuple(s.name for s in SERVICE_SPECS)
INGRESS: tuple[str, ...] = tuple(s.name for s in SERVICE_SPECS if s.ingress)
ENGINE_WORKERS: dict[str, str] = {s.engine: s.name for s in SERVICE_SPECS if s.engine}


def wanted(settings: Settings, names: list[str]) -> list[str]:
    """`names` less the services these settings do not call for."""
    return [
        n
        for n in names
        if (spec := SPECS.get(n)) is None or spec.runs_when is None or spec.runs_when(settings)
    ]


# The embedded broker's topics get one partition each unless SY_TOPIC_PARTITIONS says otherwise.
# `switchyard up` starts one consumer per group, so more partitions buy no parallelism, and Tansu
# pays for every partition of a fetch on every poll of its storage (offsets and a listing of the
# partition's batches): at concurrency 8, 4 partitions cost the broker 7.4-8.1 ms of CPU per
# request and 1 partition 4.9-6.3 (docs/stage-rules.md). Add partitions with the consumers that use them.
EMBEDDED_TOPIC_PARTITIONS = 1


@dataclass(frozen=True)
class Stack:
    """What the launcher knows when it starts one child: the settings, the embedded parts'
    addresses, the ports of the services already started, and the cores it pinned."""

    settings: Settings
    name: str
    port: int
    bootstrap: str
    embedded_kafka: bool
    milvus_uri: str = ""
    triton_url: str = ""
    triton_metrics_url: str = ""
    redis_url: str = ""  # the embedded Redis (Celery's broker), when the launcher started one
    ports: Mapping[str, int] = field(default_factory=dict)  # started services, this one included
    all_cpus: frozenset[int] = frozenset()
    service_cpus: frozenset[int] | None = None

    def url_of(self, service: str) -> str | None:
        port = self.ports.get(service, 0)
        return f"http://{self.settings.health_host}:{port}" if port else None


@dataclass(frozen=True)
class Var:
    """One variable a child gets: its value from the stack (None: not set), whether a value the
    user exported wins (`keep_user`), and which services get it (None: every one)."""

    name: str
    value: Callable[[Stack], str | None]
    keep_user: bool = False
    only: tuple[str, ...] | None = None


def _pinned(cpus: Callable[[Stack], frozenset[int] | None]) -> Callable[[Stack], str | None]:
    """A core list, set only where the launcher pinned the services to theirs."""
    return lambda st: format_cpus(cpus(st)) if st.service_cpus is not None else None  # type: ignore[arg-type]


def _db(redis_url: str, db: int) -> str | None:
    """The embedded Redis's URL on database `db`; None when none runs."""
    return f"{redis_url.rsplit('/', 1)[0]}/{db}" if redis_url else None


def _embedded(value: str) -> Callable[[Stack], str | None]:
    return lambda st: value if st.embedded_kafka else None


# Every child's environment: the launcher's own, plus these, in order.
ENV: tuple[Var, ...] = (
    Var("PYTHONUNBUFFERED", lambda st: "1"),
    Var("SY_KAFKA_BOOTSTRAP", lambda st: st.bootstrap),
    Var("SY_KAFKA_EMBEDDED", _embedded("true")),
    # The children see the embedded parts' addresses as set endpoints: tell them which mode
    # the user's own settings mean (dev unless they named a production endpoint or SY_ENV).
    Var("SY_ENV", lambda st: "production" if st.settings.production else "dev"),
    Var("SY_HEALTH_PORT", lambda st: str(st.port)),
    Var("SY_INSTANCE_ID", lambda st: f"{st.name}-1"),
    Var("SY_VAR_DIR", lambda st: str(st.settings.var_dir), keep_user=True),
    Var("SY_TRACE_FILE", lambda st: str(st.settings.var_dir / "run" / "spans.jsonl"), keep_user=True),
    Var("SY_MILVUS_URI", lambda st: st.milvus_uri or None),
    Var("SY_TRITON_URL", lambda st: st.triton_url or None),
    # Celery's broker: the embedded Redis when the launcher started one (else SQLite, batch.py).
    Var("SY_CELERY_BROKER", lambda st: st.redis_url or None, keep_user=True),
    # The same Redis holds the gateway's async requests and the tenants' rate/token counters, so
    # replicas share them (database 1: Celery keeps database 0 to itself).
    Var("SY_GATEWAY_STATE_URL", lambda st: _db(st.redis_url, 1), keep_user=True),
    Var("SY_LIMITS_STORAGE_URI", lambda st: _db(st.redis_url, 1), keep_user=True),
    Var("SY_TRITON_METRICS_URL", lambda st: (st.triton_metrics_url or None) if st.triton_url else None),
    # The registry starts first; its port may not be 8001 when that was busy.
    Var("SY_REGISTRY_URL", lambda st: st.url_of("registry"), keep_user=True),
    # The gateway peeks at the cache's lookup (it starts after the cache, so its port is known).
    Var(
        "SY_CACHE_PEEK_URL",
        lambda st: st.url_of("cache") if st.settings.cache_enabled else None,
        keep_user=True,
        only=("gateway",),
    ),
    Var("SY_FRONTEND_CPUS", _pinned(lambda st: st.service_cpus), only=("vllm_worker",)),
    # Its embedding thread on every core, like Milvus (config: cache_embed_cpus).
    Var("SY_CACHE_EMBED_CPUS", _pinned(lambda st: st.all_cpus), keep_user=True, only=("cache",)),
    # Embedded broker: joining a group takes about half the session timeout, so keep it short.
    Var("SY_KAFKA_SESSION_TIMEOUT_MS", _embedded("3000"), keep_user=True),
    Var("SY_KAFKA_HEARTBEAT_INTERVAL_MS", _embedded("500"), keep_user=True),
    Var(
        "SY_TOPIC_PARTITIONS",
        lambda st: str(st.settings.topic_partitions) if st.embedded_kafka else None,
        keep_user=True,
    ),
)


def child_env(stack: Stack, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the child `stack.name`: `base` (the launcher's own) plus ENV."""
    env = dict(os.environ if base is None else base)
    for var in ENV:
        if var.only is not None and stack.name not in var.only:
            continue
        value = var.value(stack)
        if value is None or (var.keep_user and var.name in env):
            continue
        env[var.name] = value
    return env


# --------------------------------------------------------------------------- endpoints file


def endpoints_file(settings: Settings) -> Path:
    return settings.var_dir / "run" / "endpoints.json"


def service_url(settings: Settings, name: str) -> str | None:
    """Where a running `switchyard up` put service `name`: None when none runs or it has no such service."""
    path = endpoints_file(settings)
    if not path.is_file():
        return None
    service = json.loads(path.read_text())["services"].get(name)
    return str(service["url"]) if service else None


class ServiceEndpoint(BaseModel):
    url: str
    pid: int | None
    # Why it died, counted: "SIGKILL" (not sent by the launcher: most often the OOM killer), "code 1".
    exits: dict[str, int]


class Endpoints(BaseModel):
    """var/run/endpoints.json: where a running `switchyard up` put everything."""

    kafka: str
    embedded_kafka: bool
    kafka_pid: int | None
    milvus: str
    embedded_milvus: bool
    triton: str
    embedded_triton: bool
    redis: str = ""  # the embedded Redis's URL; "" when SY_CELERY_BROKER names one or none runs
    launcher_pid: int
    launcher_url: str  # its /healthz /readyz /metrics
    services: dict[str, ServiceEndpoint]
    trace_file: str

    def summary(self, keys_set: bool) -> list[str]:
        """What `switchyard up` prints once every service is ready (`keys_set`: SY_API_KEYS is)."""
        lines = [
            "switchyard is up:",
            f"  kafka      {self.kafka}",
            *([f"  redis      {self.redis}  (Celery broker)"] if self.redis else []),
            f"  launcher   {self.launcher_url}  (/readyz /metrics: canary, broker memory)",
            *(f"  {name:<10} {info.url}  (/readyz /metrics)" for name, info in self.services.items()),
            f"  traces     {self.trace_file}",
        ]
        gw = self.services.get("gateway")
        if gw:
            keys = "set in SY_API_KEYS" if keys_set else DEFAULT_API_KEY
            lines.append(f"OpenAI API: {gw.url}/v1  (API key: {keys})")
        return [*lines, "Ctrl-C stops everything."]
