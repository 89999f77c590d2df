"""The Logs and traces section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from shared.runtime.config.base import Section


class TelemetrySettings(Section):
    """What the processes log and trace, and where."""

    title: ClassVar[str] = "Logs and traces"

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="Log level")
    log_redact_prompts: bool = Field(
        default=False,
        description="Logs keep only the size of prompt/content fields (secrets are always masked)",
    )
    log_format: Literal["json", "console"] = Field(default="json", description="Log format")
    trace_file: Path | None = Field(default=None, description="JSONL span sink (the launcher sets one)")
    trace_sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0, description="Share of new traces sampled")
