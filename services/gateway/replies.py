"""Getting replies back to the connection that waits for them.

Mechanism (DESIGN §4 "replies reach the gateway instance that holds the connection"): each
gateway replica reads its own partition of sy.responses and sy.stream (reply_lease.py: the
partition it names in `reply_to`), plus partitions nobody holds, and keeps only the records of
requests it has in flight (`ReplyRouter`). Async results are persisted (requests/store.py: Redis
shared by the replicas, or one SQLite file) together with the reader's offsets, so a restarted
or adopting replica resumes where the last reader stopped; any replica records any async
result it reads (the first wins).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from switchyard.v1.events_pb2 import StreamDelta

from shared.runtime.envelope import Envelope


@dataclass
class Waiter:
    tenant: str
    final: asyncio.Future[Envelope]
    deltas: asyncio.Queue[StreamDelta] | None = None
    received_ns: int = 0  # when the final response was read off the topic
    sent_ns: int = 0  # when its producer sent it


@dataclass
class ReplyRouter:
    waiters: dict[str, Waiter] = field(default_factory=dict)
    duplicates: int = 0

    def register(self, request_id: str, tenant: str, stream: bool) -> Waiter:
        loop = asyncio.get_running_loop()
        w = Waiter(tenant, loop.create_future(), asyncio.Queue() if stream else None)
        self.waiters[request_id] = w
        return w

    def release(self, request_id: str) -> None:
        self.waiters.pop(request_id, None)

    def on_response(self, env: Envelope, sent_ns: int) -> bool:
        w = self.waiters.get(env.request_id)
        if w is None or w.tenant != env.tenant:
            return False
        if w.final.done():
            self.duplicates += 1  # a redelivered request answered twice: the first answer wins
            return False
        w.received_ns, w.sent_ns = time.time_ns(), sent_ns
        w.final.set_result(env)
        return True

    def on_delta(self, delta: StreamDelta) -> None:
        w = self.waiters.get(delta.request_id)
        if w is not None and w.deltas is not None and w.tenant == delta.tenant and not w.final.done():
            w.deltas.put_nowait(delta)
