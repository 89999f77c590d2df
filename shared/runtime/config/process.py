"""The Process section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class ProcessSettings(Section):
    """Identity, health server and local state of each service process."""

    title: ClassVar[str] = "Process"

    instance_id: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        description="Process identity in client ids and heartbeats",
    )
    health_host: str = Field(
        default="127.0.0.1", description="Bind address of health/metrics (and REST) servers"
    )
    health_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Health/metrics port (default: per service, see DEFAULT_PORTS)",
    )
    var_dir: Path = Field(default=Path("var"), description="Local state: models, embedded data, logs, traces")
