"""Server-sent events with a bound on slow clients.

The worker never waits for a client: its deltas go to sy.stream whatever the reader does. What a
client that stops reading can hold is this replica: its stream and in-flight slots, and the
chunks buffered for it. uvicorn's `send` waits while the socket's buffers are full, so each write
is bounded: past SY_GATEWAY_STREAM_WRITE_TIMEOUT_S the response ends, uvicorn closes the
connection, and the generator is closed at once, which gives the slots back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse
from prometheus_client import Counter
from starlette.types import Message, Send

from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

SLOW_CLIENTS = Counter("sy_gateway_slow_clients_total", "Streams cut off: the client stopped reading")


class SlowClient(Exception):
    """The client's socket accepted nothing for the write timeout."""


class BoundedStreamingResponse(StreamingResponse):
    def __init__(self, content: AsyncIterator[bytes], write_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.write_timeout_s = write_timeout_s

    async def stream_response(self, send: Send) -> None:
        async def timed(message: Message) -> None:
            try:
                await asyncio.wait_for(send(message), timeout=self.write_timeout_s)
            except TimeoutError:
                raise SlowClient from None

        try:
            await super().stream_response(timed)
        except SlowClient:
            SLOW_CLIENTS.inc()
            log.warning("slow client cut off", write_timeout_s=self.write_timeout_s)
        finally:
            iterator = self.body_iterator
            if hasattr(iterator, "aclose"):
                await iterator.aclose()  # its `finally` gives the slots back now, not at GC time
