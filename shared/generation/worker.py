"""What every inference worker does the same way, whatever its engine: consume its pool's
requests, publish token deltas with their acknowledgements, the final response, and heartbeats
for the router.

`GenerationWorker` drives an engine (shared/generation/engine.py) through all of it; both the
vLLM and the Triton worker are one, so the router and the gateway see one shape of stream and
one shape of live state from every pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from opentelemetry import trace
from switchyard.v1.events_pb2 import Heartbeat, StreamDelta

from shared.generation.engine import GenerationEngine
from shared.generation.engine_io import Accumulator, DeltaBatcher, deadline_error, deadline_passed
from shared.runtime.bus import OutRecord, Producer, delta_value, reply_partition
from shared.runtime.config import Settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.envelope import Envelope, Rejected, set_error
from shared.runtime.genai import ModelLabels, annotate
from shared.runtime.health import Health
from shared.runtime.service import Service
from shared.runtime.stage import Emit, envelope_consumer
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

    def __init__(
        self, producer: Producer, topic: str, env: Envelope, flush_ms: float, partition: int | None = None
    ) -> None:
        self.producer, self.topic, self.env = producer, topic, env
        self.partition = partition  # the requester's reply partition (reply_to), as its final reply
        self.batcher = DeltaBatcher(flush_ms)
        self.failed = 0

    async def _send(self, delta: StreamDelta | None) -> None:
        if delta is not None:
            value, headers = delta_value(delta, self.env.reply_format)
            record = OutRecord(
                self.topic, value, key=self.env.request_id.encode(), headers=headers, partition=self.partition
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


class GenerationWorker:
    """sy.infer.<pool> -> engine -> sy.stream (deltas) + sy.responses (final), heartbeats to
    sy.heartbeats: one worker whatever the engine behind it."""

    def __init__(self, settings: Settings, producer: Producer, engine: GenerationEngine) -> None:
        self.settings, self.producer, self.engine = settings, producer, engine
        self.worker = settings.instance_id
        self.stream_topic, self.responses = settings.topic("stream"), settings.topic("responses")
        self.source = settings.topic(f"infer.{engine.pool}")
        self.in_flight = 0
        self.consumer: StageConsumer | None = None
        self.labels = ModelLabels(m for p in settings.pools for m in p.models)

    async def build(self, health: Health) -> Service:
        """Start the engine, then the consumer: the Service a main hands to run_service."""
        engine = self.engine
        await engine.start()
        health.add_check(engine.health_check, lambda: engine.ready)
        self.consumer = envelope_consumer(
            engine.stage,
            f"infer.{engine.pool}",
            self.handle,
            self.producer,
            self.settings,
            max_in_flight=engine.max_in_flight,
        )
        return Service(
            [self.consumer],
            background=[self.heartbeats, *engine.background()],
            on_stop=[engine.stop],
            app=engine.app(),
        )

    def refuse(self, env: Envelope, exc: Rejected) -> list[Emit]:
        return [
            Emit(self.responses, set_error(env, exc.code, exc.reason, self.engine.stage, exc.http_status))
        ]

    async def handle(self, env: Envelope) -> list[Emit]:
        """One request: refused (an error reply), or generated, streamed and answered."""
        taken = time.time_ns()
        try:
            if deadline_passed(env):
                raise deadline_error()
            job = await self.engine.prepare(env)
        except Rejected as exc:
            return self.refuse(env, exc)
        self.in_flight += 1
        try:  # from here on the job's release (a LoRA pin) always runs
            kw = job.kw
            acc = Accumulator(kw["n"], self.worker, stage=self.engine.stage, top_logprobs=kw.get("logprobs"))
            stream = StreamPublisher(
                self.producer,
                self.stream_topic,
                env,
                self.settings.stream_flush_ms,
                reply_partition(env.reply_to, self.responses),
            )
            # Unique per attempt: a redelivered request may reach the engine while the old one
            # runs, and per tenant: two tenants may send the same request id (DESIGN §6).
            attempt = f"{env.tenant}/{env.request_id}:{time.time_ns()}"
            async for step in self.engine.generate(env, job, attempt):
                await stream.add(acc.add(step, env.request_id, env.tenant))
        finally:
            self.in_flight -= 1
            if job.release is not None:
                job.release()
        await stream.close()  # the final response carries the whole text: no wait for delta acks
        finished = time.time_ns()
        env.response.CopyFrom(acc.response(self.engine.pool))
        env.response.model_version = self.engine.model_version(env.model)
        acc.add_timings(env, finished)
        self.labels.observe_server(env, taken, acc.first_token_ns, finished, acc.choices[0].token_times)
        annotate(trace.get_current_span(), env)  # the worker's stage span (shared/runtime/stage.py)
        return [Emit(self.responses, env)]

    def heartbeat(self) -> Heartbeat:
        load = self.engine.load()  # raises while the engine is unreachable: no heartbeat
        assert self.consumer is not None
        return Heartbeat(
            pool=self.engine.pool,
            worker_id=self.worker,
            engine=self.engine.engine,
            models=load.models,
            model_versions=load.model_versions,
            in_flight=self.in_flight,
            max_in_flight=self.engine.max_in_flight,
            queue_depth=load.queue_depth,
            kv_usage=load.kv_usage,
            modalities=load.modalities,
            max_lora_rank=load.max_lora_rank,
            adapters=load.adapters,
            partitions=assigned_partitions(self.consumer, self.source),
        )

    async def heartbeats(self, stop: asyncio.Event) -> None:
        await heartbeat_loop(self.settings, self.producer, self.heartbeat, stop, before=self.engine.refresh)
