"""Adapter references as callers write them: `name`, `name@3` (a version) or `name@prod` (an alias)."""

from __future__ import annotations

import re
from typing import Any

from switchyard.v1.envelope_pb2 import AdapterRef

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
SELECTOR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def parse_ref(ref: str) -> tuple[str, int | None, str | None]:
    """(name, version, alias); a bare name means alias `latest`. ValueError with the reason.

    Whole-string matches of ASCII only (as the registry checks them): a trailing newline or a
    non-ASCII digit such as `name@٣` is refused here, not read as `name` or version 3."""
    name, sep, selector = ref.partition("@")
    if not NAME_RE.fullmatch(name) or ".." in name:
        raise ValueError(f"invalid adapter name {name!r}: use lowercase letters, digits, '.', '_', '-'")
    if not sep:
        return name, None, "latest"
    if not SELECTOR_RE.fullmatch(selector):
        raise ValueError(f"invalid adapter version or alias in {ref!r}")
    if selector.isdigit():
        version = int(selector)
        if version < 1:
            raise ValueError(f"adapter versions start at 1, got {ref!r}")
        return name, version, None
    return name, None, selector


def ref_from_manifest(manifest: Any, requested: str) -> AdapterRef:
    """Pin a resolved manifest (the registry's JSON, as a model or a dict) onto the envelope."""
    get = manifest.get if isinstance(manifest, dict) else lambda k, d=None: getattr(manifest, k, d)
    return AdapterRef(
        name=get("name"),
        version=int(get("version")),
        sha256=get("sha256") or "",
        owner=get("owner") or "",
        rank=int(get("rank") or 0),
        base_model=get("base_model") or "",
        requested=requested,
        size_bytes=int(get("size_bytes") or 0),
        config_sha256=get("config_sha256") or "",
    )
