"""What may be served from and written to the cache (pure; settings in, reasons out)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.cache_rules import NO_STORE, bypass_reason
from shared.runtime.envelope import Envelope
from shared.runtime.stage import CACHE_SHADOW_TIER

__all__ = ["NO_STORE", "CachePolicy"]


@dataclass(frozen=True)
class CachePolicy:
    floor: float = 0.80  # semantic similarity floor (cosine) before the verifier
    tenant_floors: dict[str, float] = field(default_factory=dict)
    ttl_s: float = 86400.0
    sampled_tenants: frozenset[str] = frozenset()  # tenants that opt in to caching temperature > 0
    skip_length_tenants: frozenset[str] = frozenset()  # tenants whose length-cut answers are not stored
    enabled: bool = True
    target_error: float = 0.01  # error budget: false-hit rate each entry's threshold keeps under
    tenant_targets: dict[str, float] = field(default_factory=dict)

    def floor_for(self, tenant: str) -> float:
        return self.tenant_floors.get(tenant, self.floor)

    def lowest_for(self, tenant: str) -> float:
        """The floor no learned threshold goes below: the global one, or the tenant's if lower."""
        return min(self.floor, self.floor_for(tenant))

    def target_for(self, tenant: str) -> float:
        return self.tenant_targets.get(tenant, self.target_error)

    def set_floors(self, floors: dict[str, float]) -> None:
        """Replace the per-tenant floors (the cache API's settings, reloaded by every replica)."""
        self.tenant_floors.clear()
        self.tenant_floors.update(floors)

    def set_targets(self, targets: dict[str, float]) -> None:
        """Replace the per-tenant false-hit targets (as the floors)."""
        self.tenant_targets.clear()
        self.tenant_targets.update(targets)

    def bypass(self, env: Envelope) -> str | None:
        """Why this request must not be answered from (or written to) the cache; None = cacheable."""
        return bypass_reason(env, enabled=self.enabled, sampled_tenants=self.sampled_tenants)

    def storable(self, env: Envelope) -> str | None:
        """Why a finished response must not be written back; None = store it."""
        why = self.bypass(env)
        if why:
            return why
        if env.cache.tier == CACHE_SHADOW_TIER:
            return "shadow"  # a shadow check's answer: the entry it checked stays as it is
        if env.error.code:
            return "error"
        if env.cache.hit:
            return "was_hit"
        if not env.response.choices:
            return "no_choices"
        if env.tenant in self.skip_length_tenants and any(
            c.finish_reason == "length" for c in env.response.choices
        ):
            return "length"
        return None
