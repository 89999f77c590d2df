"""Getting replies back to the connection that waits for them, and keeping async results.

Mechanism (DESIGN §4 "replies reach the gateway instance that holds the connection"): every
gateway instance reads sy.responses and sy.stream in full without a consumer group and keeps
only the records of requests it has in flight (`ReplyRouter`). No routing state is shared, an
instance can die without stranding other instances' replies, and the cost grows with the number
of instances times the reply volume, which suits a handful of gateway replicas. Async results
are persisted (requests/store.py: Redis shared by the replicas, or one SQLite file) together
with each reader's offsets, so a restarted gateway resumes reading where it stopped and still
records results that arrived meanwhile; any replica records any async result (the first wins).
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
