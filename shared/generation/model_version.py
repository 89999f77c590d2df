"""A model's version: a fingerprint of the files that decide its output.

A cached answer is only valid for the weights that produced it. Model names stay the same when
weights are retrained or replaced (`sy-tiny` rebuilt, a new checkpoint under the same path), so
workers report this fingerprint in heartbeats and responses, and the cache serves and keeps only
entries of the versions that are live. The full sha256 of every weight file is memoised by
(path, size, mtime) under the var dir, so a restart of a worker on multi-GB weights does not
re-hash them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# Files whose content changes what a model answers (weights, architecture, tokenizer, chat template).
PATTERNS = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "*.safetensors",
    "*.bin",
)


def _file_sha(path: Path, memo: dict[str, str]) -> str:
    st = path.stat()
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    if key not in memo:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        memo[key] = h.hexdigest()
    return memo[key]


def fingerprint(model: str | Path, memo_file: Path | None = None) -> str:
    """16 hex chars over the model dir's output-deciding files; a hub id (no local dir) is itself."""
    root = Path(model)
    if not root.is_dir():
        return hashlib.sha256(str(model).encode()).hexdigest()[:16]
    memo: dict[str, str] = {}
    if memo_file is not None and memo_file.is_file():
        try:
            memo = json.loads(memo_file.read_text())
        except (OSError, ValueError):
            memo = {}
    files = sorted({p for pat in PATTERNS for p in root.glob(pat) if p.is_file()})
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.name}\0{_file_sha(p, memo)}\n".encode())
    if memo_file is not None:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(memo))
        tmp.replace(memo_file)
    return h.hexdigest()[:16]
