"""Pool choice over the configured pools and their live state (sy.heartbeats, sy.responses).

Decision order (DESIGN §4): capability (model, modalities, adapter rank) → health (heartbeat
age) → SLO class (interactive: the fastest pool; batch and rollout: the cheapest) → load and
adapter residency. Plain functions over plain state, so the unit tests drive it with pool tables
and heartbeat histories and no Kafka.

Health: a pool is *live* while one of its workers' heartbeats is younger than `stale_after_s`,
*down* once it had heartbeats and all went stale (its pending requests fail over), and *unknown*
while none ever came (its workers may still be starting: it stays eligible, behind live pools,
so a request waits in the pool's topic instead of failing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from switchyard.v1.envelope_pb2 import Priority

from shared.runtime.config import PoolConfig
from shared.runtime.envelope import Envelope

from .workers import WorkerTable

# Interactive traffic ranks pools by declared device class first (what the operator knows about
# the hardware), then by the TTFT the router measured (prior by class until it has measured):
# measured TTFT alone flips with momentary load, which the load term already covers.
DEVICE_RANK = {"gpu": 0, "cpu": 1, "edge": 2}
DEVICE_PRIOR_TTFT_MS = {"gpu": 10.0, "cpu": 40.0, "edge": 80.0}
EWMA_ALPHA = 0.2


@dataclass(frozen=True)
class Decision:
    pool: PoolConfig | None
    key: str
    reason: str
    http_status: int = 404


@dataclass
class PoolStats:
    """What the router measured of a pool from its responses."""

    ttft_ms: float | None = None
    served: int = 0

    def observe_ttft(self, ms: float) -> None:
        self.ttft_ms = ms if self.ttft_ms is None else (1 - EWMA_ALPHA) * self.ttft_ms + EWMA_ALPHA * ms
        self.served += 1


@dataclass(frozen=True)
class PoolSnapshot:
    health: str  # live | down | unknown
    saturated: bool
    load: float  # in-flight share over live workers
    adapters: frozenset[str]


@dataclass
class PoolState:
    """Per-pool health and speed, derived from the worker table and observed responses."""

    workers: WorkerTable
    stats: dict[str, PoolStats] = field(default_factory=dict)

    def health(self, pool: str, now: float | None = None) -> str:
        if self.workers.live(pool, now, need_partitions=False):
            return "live"
        return "down" if self.workers.seen(pool) else "unknown"

    def last_seen_age(self, pool: str, now: float | None = None) -> float | None:
        return self.workers.last_seen_age(pool, now)

    def snapshot(self, pool: str, now: float | None = None) -> PoolSnapshot:
        """Everything one decision needs about a pool, from one pass over its workers."""
        live = self.workers.live(pool, now, need_partitions=False)
        if not live:
            return PoolSnapshot("down" if self.workers.seen(pool) else "unknown", False, 0.0, frozenset())
        capacity = sum(max(1, w.hb.max_in_flight) for w in live)
        return PoolSnapshot(
            "live",
            all(w.saturated for w in live),
            sum(w.in_flight for w in live) / capacity,
            frozenset(a for w in live for a in w.hb.adapters),
        )

    def ttft_ms(self, pool: PoolConfig) -> float:
        s = self.stats.get(pool.name)
        if s is not None and s.ttft_ms is not None:
            return s.ttft_ms
        return DEVICE_PRIOR_TTFT_MS.get(pool.device, 50.0)

    def observe(self, pool: str, ttft_ms: float) -> None:
        self.stats.setdefault(pool, PoolStats()).observe_ttft(ttft_ms)


def modalities(env: Envelope) -> set[str]:
    found = {"text"}
    found.update(m.modality for m in env.media if m.modality)
    return found


def affinity_key(env: Envelope) -> str:
    """infer.* topics are keyed by adapter so one adapter's requests stay on one worker."""
    return f"{env.model}:{env.adapter.split('@', 1)[0]}" if env.adapter else env.model


def slo_class(env: Envelope) -> str:
    return "batch" if env.priority in (Priority.PRIORITY_BATCH, Priority.PRIORITY_ROLLOUT) else "interactive"


def capable_pools(env: Envelope, pools: list[PoolConfig]) -> tuple[list[PoolConfig], str]:
    """Pools able to serve the request at all, or none and why."""
    serving = [p for p in pools if env.model in p.models]
    if not serving:
        known = sorted({m for p in pools for m in p.models})
        return [], f"no pool serves model {env.model!r}; known models: {known}"
    needed = modalities(env)
    capable = [p for p in serving if needed <= p.modalities_for(env.model)]
    if not capable:
        return [], f"no pool for model {env.model!r} accepts {sorted(needed)}"
    if env.adapter:
        rank = env.adapter_ref.rank if env.HasField("adapter_ref") else 0
        capable = [p for p in capable if p.max_lora_rank > 0 and p.max_lora_rank >= rank]
        if not capable:
            why = f" of rank {rank}" if rank else ""
            return [], f"no pool for model {env.model!r} serves LoRA adapters{why}"
    return capable, ""


def adapter_label(env: Envelope) -> str:
    if env.adapter and env.HasField("adapter_ref"):
        return f"{env.adapter_ref.name}@{env.adapter_ref.version}"
    return ""


def _all_down(
    env: Envelope,
    capable: list[PoolConfig],
    state: PoolState,
    exclude: frozenset[str],
    now: float | None,
    park_max_s: float,
) -> Decision:
    """No usable pool: park a request without a deadline on the pool seen last, else fail (503)."""
    key = affinity_key(env)
    ages = {p.name: state.last_seen_age(p.name, now) for p in capable}
    if env.deadline_unix_ms == 0:
        waits = [
            p
            for p in capable
            if p.name not in exclude and (ages[p.name] or 0) <= park_max_s and ages[p.name] is not None
        ]
        if waits:
            best = min(waits, key=lambda p: (ages[p.name], p.name))
            return Decision(
                best,
                key,
                f"all capable pools down: waits on {best.name} (silent {ages[best.name]:.1f}s)"
                " for a restarted worker",
            )
    parts = [
        f"{p.name} (no heartbeat for {ages[p.name]:.1f}s)" if ages[p.name] is not None else p.name
        for p in capable
    ]
    return Decision(
        None, key, f"no live pool for model {env.model!r}: down: {', '.join(parts)}", http_status=503
    )


def _rank(p: PoolConfig, s: PoolSnapshot, state: PoolState, slo: str, label: str) -> tuple[object, ...]:
    """Sort key: live first, unsaturated, SLO class order, adapter resident, load, tie, name."""
    if slo == "interactive":
        slo_key: tuple[float, ...] = (DEVICE_RANK.get(p.device, 3), round(state.ttft_ms(p), 3))
        tie = p.cost
    else:
        slo_key, tie = (p.cost,), state.ttft_ms(p)
    return (
        s.health != "live",
        s.saturated,
        slo_key,
        not (label and label in s.adapters),
        round(s.load, 3),
        tie,
        p.name,
    )


def choose_pool(
    env: Envelope,
    pools: list[PoolConfig],
    state: PoolState | None = None,
    exclude: frozenset[str] = frozenset(),
    now: float | None = None,
    park_max_s: float = 600.0,
) -> Decision:
    """The pool for one request, with the reason (recorded in the envelope's `route` timing).

    When every capable pool is down, a request with no deadline (async, batch, rollout) is parked
    on the pool seen most recently, if within `park_max_s`: its topic keeps it for the restarted
    worker, so a worker crash costs latency, not the request. One with a deadline fails fast (503).
    """
    key = affinity_key(env)
    capable, why = capable_pools(env, pools)
    if not capable:
        return Decision(None, key, why)
    if state is None:  # no live state (tests, or before the first heartbeat): the cheapest
        best = min(capable, key=lambda p: p.cost)
        return Decision(best, key, "cheapest capable pool")
    snap = {p.name: state.snapshot(p.name, now) for p in capable}
    health = {name: s.health for name, s in snap.items()}
    usable = [p for p in capable if health[p.name] != "down" and p.name not in exclude]
    if not usable:
        return _all_down(env, capable, state, exclude, now, park_max_s)
    slo = slo_class(env)
    label = adapter_label(env)
    best = min(usable, key=lambda p: _rank(p, snap[p.name], state, slo, label))
    s = snap[best.name]
    basis = (
        f"{best.device}, ttft~{state.ttft_ms(best):.0f}ms" if slo == "interactive" else f"cost {best.cost:g}"
    )
    reason = f"{slo}: {s.health} pool, {basis}, load {s.load:.2f}"
    if s.saturated:
        reason += " (saturated: it queues)"
    if label and label in s.adapters:
        reason += f", {label} resident"
    skipped = sorted(n for n, h in health.items() if h == "down")
    if skipped:
        reason += f"; down: {','.join(skipped)}"
    return Decision(best, key, reason)
