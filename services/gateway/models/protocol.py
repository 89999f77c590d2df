"""Response bodies of GET /v1/models and GET /v1/models/{id}: vLLM's model cards, plus each
adapter's versions and aliases (what `name@3` and `name@prod` pin right now)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class AdapterVersionCard(BaseModel):
    """One live version of an adapter, as `name@<version>` names it."""

    id: str = Field(description="name@version: the id that pins this version")
    version: int
    created: int = Field(description="when the version was published (Unix seconds)")
    base_model: str
    rank: int
    aliases: list[str] = Field(description="the aliases that point at this version")


class ModelCard(BaseModel):
    """A base model (`parent` null) or an adapter (`parent` its base model, as vLLM lists LoRAs)."""

    id: str = Field(
        description="the id as listed or as asked for: a base model, `name`, `name@3`, `name@prod`"
    )
    object: Literal["model"]
    created: int
    owned_by: str
    root: str = Field(description="a base model's id; for an adapter the `name@version` this id pins now")
    parent: str | None = Field(description="the base model of an adapter; null for a base model")
    version: int | None = Field(default=None, description="adapters: the version this id pins now")
    versions: list[AdapterVersionCard] | None = Field(
        default=None, description="adapters: every live version, oldest first"
    )
    aliases: dict[str, int] | None = Field(default=None, description="adapters: alias -> version")


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]
