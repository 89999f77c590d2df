"""The Object storage section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, SecretStr

from shared.runtime.config.base import Section


class StorageSettings(Section):
    """Where objects (media, adapters, batch files) are kept: S3/MinIO or a local directory."""

    title: ClassVar[str] = "Object storage"

    s3_endpoint: str | None = Field(
        default=None,
        description="S3/MinIO endpoint host:port; unset = local directory <var_dir>/objects",
    )
    s3_access_key: str | None = Field(default=None, description="S3 access key")
    s3_secret_key: SecretStr | None = Field(default=None, description="S3 secret key (never logged)")
    s3_bucket: str = Field(
        default="switchyard", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", description="S3 bucket"
    )
    s3_secure: bool = Field(default=False, description="Use HTTPS for S3")
    s3_region: str | None = Field(default=None, description="S3 region")
    storage_dir: Path | None = Field(
        default=None, description="Local object store root (default: <var_dir>/objects)"
    )
