"""The CPU placement section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from shared.runtime.config.base import CpuList, Section


class CpuSettings(Section):
    """Which cores the services and the vLLM engine run on when `switchyard up` pins them (CPU hosts)."""

    title: ClassVar[str] = "CPU placement"

    service_cpus: CpuList = Field(
        default="auto",
        description="`switchyard up` on a CPU host keeps every process but the vLLM engine on these cores "
        '("3" or "12-15"); auto: the last quarter (at least one) when there is no GPU; off: no pinning',
    )
    engine_cpus: Literal["own", "shared"] = Field(
        default="own",
        description="With SY_SERVICE_CPUS pinning: own = the vLLM engine runs on the cores the services leave; "
        "shared = on every core, the services' too (measured: own +18 % tokens/s at concurrency 1, +27 % at 8)",
    )
    frontend_cpus: CpuList | None = Field(
        default=None,
        description="Set by the launcher: the vLLM worker moves its own threads here once the engine has started",
    )
