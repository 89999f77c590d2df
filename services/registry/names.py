"""Names, aliases and refs of adapters, and the refusal every check raises (RegistryError)."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
ALIAS_RE = re.compile(r"^[a-z][a-z0-9._-]{0,63}$")  # starts with a letter: never read as a version
TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LATEST = "latest"


class RegistryError(Exception):
    """A refusal with its HTTP status and a reason meant for the uploader."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def refuse(message: str, code: str = "invalid_adapter", param: str | None = None, status: int = 422) -> None:
    raise RegistryError(status, message, code, param)


def check_name(name: str) -> str:
    """Adapter names end up in object keys and topic keys: a strict charset, no traversal."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name:
        refuse(
            f"invalid adapter name {name!r}: use 1-64 of a-z 0-9 . _ - starting with a letter or digit, no '..'",
            "invalid_name",
            "name",
            400,
        )
    return name


def check_alias(alias: str) -> str:
    if not isinstance(alias, str) or not ALIAS_RE.fullmatch(alias) or ".." in alias:
        refuse(
            f"invalid alias {alias!r}: use 1-64 of a-z 0-9 . _ - starting with a letter, no '..'",
            "invalid_alias",
            "alias",
            400,
        )
    return alias


def parse_ref(ref: str) -> tuple[str, int | None, str | None]:
    """`name` | `name@N` | `name@alias` → (name, version, alias); `name` means `name@latest`."""
    name, sep, pin = ref.partition("@")
    check_name(name)
    if not sep:
        return name, None, LATEST
    if pin.isdigit() and pin.isascii():
        v = int(pin)
        if v < 1:
            refuse(f"invalid ref {ref!r}: versions start at 1", "invalid_ref", "ref", 400)
        return name, v, None
    try:
        return name, None, check_alias(pin)
    except RegistryError:
        refuse(f"invalid ref {ref!r}: expected name, name@N or name@alias", "invalid_ref", "ref", 400)
    raise AssertionError("unreachable")
