"""Which settings sections each service receives, and the per-service settings class.

`load_settings(service=...)` validates the whole configuration (so a typo or a cross-section
conflict stops every process alike), then hands the service an object of only its sections:
reading another component's setting is an AttributeError, and `tests/unit/test_service_settings.py`
checks each service's code against this table. SY_ENV is resolved before the projection, so
every process agrees on production mode whichever endpoints its sections hold.
"""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel, ConfigDict

from shared.runtime.config.base import Section
from shared.runtime.config.batch import BatchSettings
from shared.runtime.config.cache import CacheSettings
from shared.runtime.config.cpus import CpuSettings
from shared.runtime.config.derived import Derived
from shared.runtime.config.gateway import GatewaySettings
from shared.runtime.config.kafka import KafkaSettings
from shared.runtime.config.limits import TenantLimitsSettings
from shared.runtime.config.media import MediaSettings
from shared.runtime.config.pools import PoolSettings
from shared.runtime.config.process import ProcessSettings
from shared.runtime.config.registry import RegistrySettings
from shared.runtime.config.rewards import RewardSettings
from shared.runtime.config.router import RouterSettings
from shared.runtime.config.sandbox import SandboxSettings
from shared.runtime.config.security import SecuritySettings
from shared.runtime.config.stage import StageSettings
from shared.runtime.config.storage import StorageSettings
from shared.runtime.config.telemetry import TelemetrySettings
from shared.runtime.config.triton import TritonSettings
from shared.runtime.config.vllm import VllmSettings
from shared.runtime.config.workers import WorkerSettings

# Every service process: the bus, the stage runtime, its own process and health, logs, auth.
COMMON: tuple[type[Section], ...] = (
    KafkaSettings,
    StageSettings,
    ProcessSettings,
    TelemetrySettings,
    SecuritySettings,
)

# What each service reads beyond COMMON (why, where it is not obvious).
SERVICE_SECTIONS: dict[str, tuple[type[Section], ...]] = {
    "gateway": (
        GatewaySettings,
        TenantLimitsSettings,
        PoolSettings,  # which models exist (/v1/models, 404 for unknown ones)
        VllmSettings,  # the default model and context length (token estimates)
        CacheSettings,  # the peek before produce
        BatchSettings,
        StorageSettings,  # files and batch output
        RegistrySettings,  # adapter lookups
        RewardSettings,  # rollout size limits
        SandboxSettings,  # reward specs are checked at submit
    ),
    "preprocess": (
        MediaSettings,
        PoolSettings,
        VllmSettings,
        CacheSettings,  # whether a request is cacheable
        StorageSettings,  # claim-check blobs
        RegistrySettings,
        RewardSettings,
        SandboxSettings,
    ),
    "cache": (CacheSettings, StorageSettings, PoolSettings),  # PoolSettings: where MiniLM lives
    "router": (
        RouterSettings,
        PoolSettings,
        GatewaySettings,  # a parked request gives up when the gateway would
        WorkerSettings,  # heartbeats: when a worker counts as gone
    ),
    "registry": (RegistrySettings, TenantLimitsSettings, PoolSettings, StorageSettings),
    "reward": (RewardSettings, SandboxSettings, RegistrySettings),
    "batch": (BatchSettings, StorageSettings, PoolSettings, RegistrySettings),  # lines name models
    "vllm_worker": (VllmSettings, WorkerSettings, PoolSettings, RegistrySettings, CpuSettings),
    "triton_worker": (TritonSettings, WorkerSettings, PoolSettings, StorageSettings),
}


def sections_of(service: str) -> tuple[type[Section], ...]:
    """COMMON plus the service's own sections, in docs order; KeyError for an unknown service."""
    return COMMON + SERVICE_SECTIONS[service]


@cache
def settings_class(service: str) -> type[BaseModel]:
    """A frozen model with the fields of the service's sections only, and the derived values."""
    bases = (Derived, *reversed(sections_of(service)), BaseModel)
    name = "".join(part.title() for part in service.split("_")) + "Settings"
    return type(name, bases, {"model_config": ConfigDict(frozen=True), "__module__": __name__})


def for_service(full: BaseModel, service: str) -> BaseModel:
    """The service's view of validated settings: its sections' values, SY_ENV resolved."""
    cls = settings_class(service)
    values = {name: getattr(full, name) for name in cls.model_fields}
    values["env"] = "production" if full.production else values["env"] or "dev"
    return cls.model_construct(**values)
