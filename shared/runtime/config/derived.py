"""Values derived from settings (paths, topic names, modes), shared by the full `Settings` and
each service's own settings class. Each reads only fields of the sections that use it: the
per-service classes (shared/runtime/config/services.py) lack the other sections' fields.
"""

from __future__ import annotations

from pathlib import Path

from shared.runtime.config.base import DEFAULT_PORTS
from shared.runtime.config.pools import PoolConfig

# A production endpoint set while SY_ENV is unset means production mode.
PRODUCTION_ENDPOINTS = ("kafka_bootstrap", "milvus_uri", "s3_endpoint")


class Derived:
    """Properties over the fields; a mixin, so that each settings class has them."""

    @property
    def production(self) -> bool:
        """Production mode: SY_ENV=production, or unset with a production endpoint configured."""
        if self.env is not None:
            return self.env == "production"
        # Only the full Settings gets here: a service's settings carry SY_ENV resolved.
        return any(getattr(self, f, None) for f in PRODUCTION_ENDPOINTS)

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
