"""The Adapter registry section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class RegistrySettings(Section):
    """The LoRA adapter registry and the workers' adapter cache (docs/adapters.md)."""

    title: ClassVar[str] = "Adapter registry"

    registry_url: str = Field(
        default="http://127.0.0.1:8001", description="Adapter registry base URL (services call it)"
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
