"""What may be served from and written to the cache (pure; settings in, reasons out)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.cache_rules import NO_STORE, bypass_reason
from shared.runtime.envelope import Envelope

__all__ = ["NO_STORE", "CachePolicy"]


@dataclass(frozen=True)
class CachePolicy:
    floor: float = 0.80  # semantic similarity floor (cosine) before the verifier
    tenant_floors: dict[str, float] = field(default_factory=dict)
    ttl_s: float = 86400.0
    sampled_tenants: frozenset[str] = frozenset()  # tenants that opt in to caching temperature > 0
    skip_length_tenants: frozenset[str] = frozenset()  # tenants whose length-cut answers are not stored
    enabled: bool = True

    def floor_for(self, tenant: str) -> float:
        return self.tenant_floors.get(tenant, self.floor)

    def set_floors(self, floors: dict[str, float]) -> None:
        """Replace the per-tenant floors (the cache API's settings, reloaded by every replica)."""
        self.tenant_floors.clear()
        self.tenant_floors.update(floors)

    def bypass(self, env: Envelope) -> str | None:
        """Why this request must not be answered from (or written to) the cache; None = cacheable."""
        return bypass_reason(env, enabled=self.enabled, sampled_tenants=self.sampled_tenants)

    def storable(self, env: Envelope) -> str | None:
        """Why a finished response must not be written back; None = store it."""
        why = self.bypass(env)
        if why:
            return why
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
