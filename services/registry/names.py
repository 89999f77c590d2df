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


def _strict(value: str, pattern: re.Pattern[str], param: str, what: str, first: str) -> str:
    """`value` in `pattern`'s charset and free of '..' (it ends up in object and topic keys), else a
    400 naming the rule."""
    if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value:
        refuse(
            f"invalid {what} {value!r}: use 1-64 of a-z 0-9 . _ - starting with {first}, no '..'",
            f"invalid_{param}",
            param,
            400,
        )
    return value


def check_name(name: str) -> str:
    """Adapter names end up in object keys and topic keys: a strict charset, no traversal."""
    return _strict(name, NAME_RE, "name", "adapter name", "a letter or digit")


def check_alias(alias: str) -> str:
    return _strict(alias, ALIAS_RE, "alias", "alias", "a letter")


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
