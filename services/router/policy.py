"""Pool choice: the first configured pool that serves the model and the request's modalities.

Live load, health and adapter residency from sy.heartbeats come with the Triton pool issue;
the decision is already a plain function so that policy can grow without touching Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config import PoolConfig
from shared.envelope import Envelope


@dataclass(frozen=True)
class Decision:
    pool: PoolConfig | None
    key: str
    reason: str


def modalities(env: Envelope) -> set[str]:
    found = {"text"}
    found.update(m.modality for m in env.media if m.modality)
    return found


def affinity_key(env: Envelope) -> str:
    """infer.* topics are keyed by adapter so one adapter's requests stay on one worker."""
    return f"{env.model}:{env.adapter.split('@', 1)[0]}" if env.adapter else env.model


def choose_pool(env: Envelope, pools: list[PoolConfig]) -> Decision:
    key = affinity_key(env)
    serving = [p for p in pools if env.model in p.models]
    if not serving:
        known = sorted({m for p in pools for m in p.models})
        return Decision(None, key, f"no pool serves model {env.model!r}; known models: {known}")
    needed = modalities(env)
    capable = [p for p in serving if needed <= set(p.modalities)]
    if not capable:
        return Decision(None, key, f"no pool for model {env.model!r} accepts {sorted(needed)}")
    if env.adapter:
        capable = [p for p in capable if p.max_lora_rank > 0]
        if not capable:
            return Decision(None, key, f"no pool for model {env.model!r} serves LoRA adapters")
    best = min(capable, key=lambda p: p.cost)
    return Decision(best, key, "cheapest capable pool")
