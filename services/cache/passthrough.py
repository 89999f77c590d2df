"""Cache stage placeholder in the topology: every request is a miss and goes on to routing.

The Milvus semantic cache replaces this (issue "Semantic cache on Milvus"); the stage,
its topics and its timing entry already exist so the pipeline's shape does not change.
"""

from __future__ import annotations

from shared.envelope import Envelope


def lookup(env: Envelope) -> Envelope | None:
    """Return a cached response envelope, or None for a miss (always, for now)."""
    return None
