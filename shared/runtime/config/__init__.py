"""Every `SY_*` setting (pydantic-settings), in sections by component.

`Settings` inherits one section class per component (shared/runtime/config/<section>.py), so
fields stay flat attributes and variables; docs/configuration.md has one table per section.
"""

from shared.runtime.config.base import DEFAULT_PORTS, ENV_PREFIX, ConfigError, Section
from shared.runtime.config.pools import PoolConfig
from shared.runtime.config.services import SERVICE_SECTIONS, for_service, sections_of
from shared.runtime.config.settings import (
    SECTIONS,
    Settings,
    get_settings,
    known_env_vars,
    load_settings,
    use_settings,
)

__all__ = [
    "DEFAULT_PORTS",
    "ENV_PREFIX",
    "SECTIONS",
    "ConfigError",
    "PoolConfig",
    "Section",
    "Settings",
    "get_settings",
    "known_env_vars",
    "load_settings",
    "use_settings",
    "SERVICE_SECTIONS",
    "for_service",
    "sections_of",
]
