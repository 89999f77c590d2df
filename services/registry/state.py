"""One adapter's state (owner, visibility, aliases, versions) and where its objects live in the store.

Layout: `adapters/<name>/v<N>/{adapter_model.safetensors, adapter_config.json, manifest.json}`
and `adapters/<name>/state.json`; see catalog.py for how they are written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from shared.adapters.registry_client import ADAPTER_FILES, Adapter, Manifest

from .names import LATEST, RegistryError

PREFIX = "adapters/"
MODEL_FILE, CONFIG_FILE = ADAPTER_FILES
MANIFEST_FILE = "manifest.json"
STATE_FILE = "state.json"


def not_found(what: str) -> RegistryError:
    return RegistryError(404, f"{what} not found", "not_found")


@dataclass
class AdapterState:
    name: str
    owner: str
    visibility: str = "private"
    aliases: dict[str, int] = field(default_factory=dict)
    next_version: int = 1
    deleted: bool = False  # tombstone: keeps next_version so numbers are never reused
    versions: dict[int, Manifest] = field(default_factory=dict)  # live versions (from manifests)

    def state_json(self) -> bytes:
        body = {
            "name": self.name,
            "owner": self.owner,
            "visibility": self.visibility,
            "aliases": dict(sorted(self.aliases.items())),
            "next_version": self.next_version,
            "deleted": self.deleted,
        }
        return json.dumps(body, indent=2).encode()

    @classmethod
    def from_json(cls, name: str, body: bytes) -> AdapterState:
        """The state.json written by `state_json` (versions come from the manifests)."""
        raw = json.loads(body)
        return cls(
            name=name,
            owner=raw["owner"],
            visibility=raw.get("visibility", "private"),
            aliases={str(a): int(v) for a, v in raw.get("aliases", {}).items()},
            next_version=int(raw.get("next_version", 1)),
            deleted=bool(raw.get("deleted", False)),
        )

    def manifest(self, v: int) -> Manifest:
        m = self.versions[v]
        return m.model_copy(
            update={
                "owner": self.owner,
                "visibility": self.visibility,
                "aliases": sorted(a for a, t in self.aliases.items() if t == v),
            }
        )

    def view(self) -> Adapter:
        return Adapter(
            name=self.name,
            owner=self.owner,
            visibility=self.visibility,  # type: ignore[arg-type]
            versions=[self.manifest(v) for v in sorted(self.versions)],
            aliases=dict(sorted(self.aliases.items())),
        )

    def fix_latest(self) -> None:
        """`latest` always names the newest live version (absent when there is none)."""
        if self.versions:
            self.aliases[LATEST] = max(self.versions)
        else:
            self.aliases.pop(LATEST, None)


def object_key(name: str, *parts: str) -> str:
    return "/".join([PREFIX.rstrip("/"), name, *parts])
