"""Collect batch answers off sy.responses into object storage, in group commits.

Each answer waits (its handler awaits) until the chunk holding it is stored; only then does the
consumer commit its offset. A crash between the two re-reads the answer, and the job keeps the
first answer per line, so nothing is lost and nothing counts twice.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from shared.batches.store import BatchStore
from shared.runtime.envelope import Envelope
from shared.runtime.stage import Emit
from shared.runtime.telemetry import get_logger

from .lines import result_of

log = get_logger(__name__)


@dataclass
class _Pending:
    rows: list[dict[str, Any]] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


class Collector:
    def __init__(self, store: BatchStore, instance: str, window_s: float = 0.1, max_rows: int = 500) -> None:
        self.store, self.instance = store, instance
        self.window_s, self.max_rows = window_s, max_rows
        self._pending: dict[str, _Pending] = {}
        self._seq = itertools.count()
        self._kick = asyncio.Event()
        self.stored = 0

    async def handle(self, env: Envelope) -> list[Emit]:
        """Stage handler: batch answers are stored; everything else on the topic is not ours."""
        if not env.batch_id:
            return []
        p = self._pending.setdefault(env.batch_id, _Pending())
        p.rows.append(result_of(env, int(time.time())))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        p.waiters.append(fut)
        if sum(len(x.rows) for x in self._pending.values()) >= self.max_rows:
            self._kick.set()
        await fut  # raises when the chunk could not be stored: the bus retries the record
        return []

    async def run(self, stop: asyncio.Event) -> None:
        """Flush pending answers every window (sooner when many are waiting)."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=self.window_s)
            except TimeoutError:
                pass
            self._kick.clear()
            await self.flush()
        await self.flush()

    async def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for batch_id, p in pending.items():
            name = f"{time.time_ns()}-{self.instance}-{next(self._seq)}"
            try:
                await self.store.add_results(batch_id, name, p.rows)
            except Exception as exc:  # noqa: BLE001 - handed back to each record's handler
                log.warning("storing batch answers failed", batch_id=batch_id, error=str(exc))
                for f in p.waiters:
                    if not f.done():
                        f.set_exception(exc)
                continue
            self.stored += len(p.rows)
            for f in p.waiters:
                if not f.done():
                    f.set_result(None)
