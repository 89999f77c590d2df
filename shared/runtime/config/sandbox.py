"""The Code sandbox section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class SandboxSettings(Section):
    """Isolation of the untrusted programs of the code_tests reward (issue 33)."""

    title: ClassVar[str] = "Code sandbox"

    sandbox_bwrap: str = Field(
        default="bwrap",
        description="bubblewrap binary (a path, or a name on PATH) that isolates code_tests programs; missing or unusable: code_tests answers sandbox_unavailable",
    )
    sandbox_allow_weak: bool = Field(
        default=False,
        description="Without OS isolation, run code_tests programs anyway under rlimits and an audit hook, as the service's uid (unsafe: development only)",
    )
    sandbox_uid: int = Field(
        default=64000,
        ge=1,
        le=2**31 - 65,
        description="When the service runs as root, code_tests programs run as one of the 64 uids from this one (one per concurrent program); they must own nothing on the host",
    )
    sandbox_url: str = Field(
        default="",
        description="A sandbox runner (`python -m shared.rewards.sandbox`; in Kubernetes its own Deployment without secrets or egress) that runs code_tests programs; empty: run them in this process's sandbox",
    )
