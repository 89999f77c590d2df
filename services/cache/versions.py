"""Which weights version of each model is live, from worker heartbeats (pure; no Kafka).

An answer is only reusable while the weights that produced it still serve: when a model is
retrained or replaced under the same name, its workers report a new fingerprint
(shared/generation/model_version.py). The cache then serves only entries of live versions and deletes the
others. A version is live while some worker reported it within `window_s`; while no version of a
model is known (no worker up yet, or all of them down), nothing is filtered or deleted, so a
restart of every worker does not wipe the cache.
"""

from __future__ import annotations

import time

from switchyard.v1.events_pb2 import Heartbeat


class LiveVersions:
    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._seen: dict[str, dict[str, float]] = {}  # model -> version -> last report (unix s)
        self._last: dict[str, frozenset[str]] = {}  # live sets as last returned by changes()

    def observe(self, hb: Heartbeat) -> None:
        at = hb.sent_unix_ns / 1e9 if hb.sent_unix_ns else time.time()
        for model, version in hb.model_versions.items():
            if version:
                seen = self._seen.setdefault(model, {})
                seen[version] = max(at, seen.get(version, 0.0))

    def live(self, model: str, now: float | None = None) -> frozenset[str]:
        """Versions reported within the window; empty = unknown (serve and keep everything)."""
        t = time.time() if now is None else now
        return frozenset(v for v, at in self._seen.get(model, {}).items() if t - at <= self.window_s)

    def changes(self, now: float | None = None) -> dict[str, frozenset[str]]:
        """Models whose (non-empty) live set differs from the last call: their entries to prune."""
        out: dict[str, frozenset[str]] = {}
        for model in self._seen:
            cur = self.live(model, now)
            if cur and cur != self._last.get(model):
                out[model] = cur
                self._last[model] = cur
        return out
