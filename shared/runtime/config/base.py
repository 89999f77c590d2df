"""What every settings section shares: the variable prefix, the error type, the section base."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import AfterValidator, BaseModel

from shared.runtime.cpus import OFF, parse_cpus

ENV_PREFIX = "SY_"

# Health/metrics port of each service process when SY_HEALTH_PORT is not set.
DEFAULT_PORTS: dict[str, int] = {
    "gateway": 8000,
    "registry": 8001,
    "preprocess": 9101,
    "cache": 9102,
    "router": 9103,
    "vllm_worker": 9104,
    "triton_worker": 9105,
    "reward": 9106,
    "batch": 9107,
}


class ConfigError(RuntimeError):
    """Raised for unknown or invalid settings; the message is meant for a person."""


class Section(BaseModel):
    """A group of settings of one component. `Settings` inherits every section, so each field
    stays a flat attribute (`settings.kafka_bootstrap`) and a flat variable (SY_KAFKA_BOOTSTRAP);
    the sections are how the fields are kept and documented (docs/configuration.md). Validator
    names must be unique across sections: in `Settings` a validator hides one of the same name."""

    title: ClassVar[str] = ""


def check_cpu_list(v: str | None) -> str | None:
    """A core list ("3", "12-15", "0,2"), "auto", an off word, or unset; raises with the reason."""
    if v is None or v.strip().lower() in OFF | {"auto"}:
        return v
    parse_cpus(v)  # raises with the reason
    return v


# A settings field holding a core list: `CpuList`, or `CpuList | None` where unset is allowed.
# One annotated type instead of a validator per section (validator names clash in `Settings`).
CpuList = Annotated[str, AfterValidator(check_cpu_list)]
