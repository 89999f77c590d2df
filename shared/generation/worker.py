"""What every inference worker does the same way, whatever its engine: publish token deltas
with their acknowledgements, and heartbeats for the router.

Both the vLLM and the Triton worker use these, so the router and the gateway see one shape of
stream and one shape of live state from every pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from switchyard.v1.events_pb2 import Heartbeat, StreamDelta

from shared.generation.engine_io import DeltaBatcher
from shared.runtime.bus import CONTENT_TYPE_HEADER, OutRecord, Producer, StageConsumer
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


class StreamPublisher:
    """Coalesced deltas of one generation to sy.stream.

    Nothing waits for their acks: the final response on sy.responses carries the whole text, and
    the gateway fills in from it what its stream has not shown yet (a delta that arrives after the
    final response is dropped there). Waiting for the last delta's ack before the final response
    went out put a broker round trip on every request's end, which in a closed loop is time the
    engine's batch runs one sequence short.
    """

    def __init__(self, producer: Producer, topic: str, env: Envelope, flush_ms: float) -> None:
        self.producer, self.topic, self.env = producer, topic, env
        self.batcher = DeltaBatcher(flush_ms)
        self.failed = 0

    async def _send(self, delta: StreamDelta | None) -> None:
        if delta is not None:
            record = OutRecord(
                self.topic,
                delta.SerializeToString(),
                key=self.env.request_id.encode(),
                headers=[(CONTENT_TYPE_HEADER, b"application/x-protobuf")],
            )
            (await self.producer.send_soon(record)).add_done_callback(self._acked)

    def _acked(self, ack: asyncio.Future[object]) -> None:
        if not ack.cancelled() and ack.exception() is not None:
            self.failed += 1  # the final response still carries this text
            log.warning(
                "stream delta not delivered", request_id=self.env.request_id, error=str(ack.exception())
            )

    async def add(self, delta: StreamDelta | None) -> None:
        if delta is not None and self.env.request.sampling.stream:
            await self._send(self.batcher.add(delta))

    async def close(self) -> None:
        """Send what is left; the final response may go out before the broker has acked it."""
        await self._send(self.batcher.flush())


def assigned_partitions(consumer: StageConsumer, topic: str) -> list[int]:
    """Partitions of `topic` this worker consumes: the router's affinity target."""
    return sorted(tp.partition for tp in consumer.consumer.assignment() if tp.topic == topic)


async def heartbeat_loop(
    settings: Settings,
    producer: Producer,
    make: Callable[[], Heartbeat],
    stop: asyncio.Event,
    before: Callable[[], object] | None = None,
) -> None:
    """Publish `make()` to sy.heartbeats every SY_HEARTBEAT_INTERVAL_S until `stop`.

    `before` (may be a coroutine function) refreshes state first; its failure and a failed send
    only skip one beat: the router treats a worker as gone after several missed beats.
    """
    topic = settings.topic("heartbeats")
    while not stop.is_set():
        if before is not None:
            try:
                res = before()
                if asyncio.iscoroutine(res):
                    await res
            except Exception as exc:  # noqa: BLE001 - state refresh is best effort
                log.warning("heartbeat state refresh failed", error=str(exc))
        try:
            hb = make()
            hb.sent_unix_ns = time.time_ns()
            await producer.send(OutRecord(topic, hb.SerializeToString(), key=hb.worker_id.encode()))
        except Exception as exc:  # noqa: BLE001 - a missed heartbeat is not fatal
            log.warning("heartbeat failed", error=str(exc))
        try:
            await asyncio.wait_for(stop.wait(), timeout=settings.heartbeat_interval_s)
        except TimeoutError:
            pass
