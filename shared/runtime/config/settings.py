"""`Settings`: every section of the configuration in one flat, frozen object read from SY_* variables.

Services read only this object, so the docs page, the compose file and the launcher can all be
checked against one list. Unknown or invalid `SY_*` variables stop the process at start-up with a
message naming the variable: a typo must not silently fall back to a default.
"""

from __future__ import annotations

import difflib
import os
from functools import lru_cache
from typing import ClassVar

from pydantic import ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from shared.runtime.config.base import ENV_PREFIX, ConfigError, Section
from shared.runtime.config.batch import BatchSettings
from shared.runtime.config.cache import CacheSettings
from shared.runtime.config.cpus import CpuSettings
from shared.runtime.config.derived import Derived
from shared.runtime.config.gateway import GatewaySettings
from shared.runtime.config.kafka import KafkaSettings
from shared.runtime.config.launcher import LauncherSettings
from shared.runtime.config.limits import TenantLimitsSettings
from shared.runtime.config.media import MediaSettings
from shared.runtime.config.pools import PoolSettings
from shared.runtime.config.process import ProcessSettings
from shared.runtime.config.registry import RegistrySettings
from shared.runtime.config.rewards import RewardSettings
from shared.runtime.config.router import RouterSettings
from shared.runtime.config.sandbox import SandboxSettings
from shared.runtime.config.security import SecuritySettings
from shared.runtime.config.services import for_service
from shared.runtime.config.stage import StageSettings
from shared.runtime.config.storage import StorageSettings
from shared.runtime.config.telemetry import TelemetrySettings
from shared.runtime.config.triton import TritonSettings
from shared.runtime.config.vllm import VllmSettings
from shared.runtime.config.workers import WorkerSettings

# In the order of docs/configuration.md.
SECTIONS: tuple[type[Section], ...] = (
    KafkaSettings,
    StageSettings,
    ProcessSettings,
    TelemetrySettings,
    CpuSettings,
    LauncherSettings,
    SecuritySettings,
    GatewaySettings,
    TenantLimitsSettings,
    PoolSettings,
    RouterSettings,
    WorkerSettings,
    VllmSettings,
    TritonSettings,
    CacheSettings,
    MediaSettings,
    StorageSettings,
    RegistrySettings,
    RewardSettings,
    SandboxSettings,
    BatchSettings,
)


class Settings(
    Derived,
    # Last section first: pydantic orders fields from the last base to the first, so the
    # fields (and SY_* errors) come in the order of SECTIONS.
    BatchSettings,
    SandboxSettings,
    RewardSettings,
    RegistrySettings,
    StorageSettings,
    MediaSettings,
    CacheSettings,
    TritonSettings,
    VllmSettings,
    WorkerSettings,
    RouterSettings,
    PoolSettings,
    TenantLimitsSettings,
    GatewaySettings,
    SecuritySettings,
    LauncherSettings,
    CpuSettings,
    TelemetrySettings,
    ProcessSettings,
    StageSettings,
    KafkaSettings,
    BaseSettings,
):
    """Every section's fields as flat attributes; checks that span sections are here. A service
    process receives only its sections (`for_service`, shared/runtime/config/services.py)."""

    title: ClassVar[str] = "All settings"
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

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


def load_settings(service: str | None = None, **overrides: object) -> Settings:
    """Read and validate the settings from the environment; raise ConfigError, one line per problem.
    With `service`, the result holds that service's sections only (services.py: `for_service`)."""
    _check_unknown(dict(os.environ))
    try:
        full = Settings(**overrides)  # type: ignore[arg-type]
        # Typed as Settings for the code that reads it; at run time only the service's fields.
        return full if service is None else for_service(full, service)  # type: ignore[return-value]
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


_process: list[Settings] = []  # a service process's own settings, once run_service has them


def use_settings(settings: Settings) -> None:
    """Make `settings` what get_settings answers in this process (run_service's service view)."""
    _process[:] = [settings]


@lru_cache(maxsize=1)
def _all_settings() -> Settings:
    return load_settings()


def get_settings() -> Settings:
    """The process-wide settings: the service's own in a service process, else all, read once."""
    return _process[0] if _process else _all_settings()


get_settings.cache_clear = _all_settings.cache_clear  # type: ignore[attr-defined]
