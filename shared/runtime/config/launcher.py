"""The Launcher section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class LauncherSettings(Section):
    """Read by `switchyard up` only: its own endpoints, start-up wait, broker watch and canary."""

    title: ClassVar[str] = "Launcher"

    ready_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="How long `switchyard up` waits for every service to be ready (engines load slowly on busy CPUs)",
    )
    launcher_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of `switchyard up`'s own /healthz /readyz /metrics (0: a free port, printed and written to var/run/endpoints.json)",
    )
    broker_rss_warn_mb: int = Field(
        default=48,
        ge=0,
        description="`switchyard up` warns when the embedded broker's RSS crosses this many MiB, and again at each further multiple: the embedded broker keeps every byte in memory until it restarts and its CPU per request grows with what it holds; the pipeline's CPU per request passes 1.2x its start near 50 MiB (~7k ordinary requests, `loadtests stability`): warn a little before (0: never warn)",
    )
    canary_interval_s: float = Field(
        default=120.0,
        ge=0,
        description="`switchyard up` sends one tiny request through the gateway and one through sy.requests this often while the gateway has no other traffic; a failure makes its /readyz false (0: off)",
    )
    canary_timeout_s: float = Field(
        default=60.0, gt=0, description="A canary request slower than this counts as failed"
    )
