"""gateway: REST in, sy.requests out; replies read back from sy.responses and sy.stream."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from switchyard.v1.events_pb2 import StreamDelta

from shared.adapters.registry_client import RegistryClient
from shared.prepare import TextPreparer
from shared.runtime.bus import (
    JOB_HEADER,
    FetchWaitGuard,
    OutRecord,
    Producer,
    client_kwargs,
    header,
    rewind_reset_logs,
    sent_ns,
)
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Rejected, decode
from shared.runtime.health import Health
from shared.runtime.ingest_auth import ServiceSigner
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import Emit, out_record
from shared.runtime.telemetry import get_logger

from .api import Backend, BodyLimit, async_result, create_app, refuse_oversized
from .cache_peek import CachePeek
from .replies import ReplyRouter, ResultStore
from .rollouts import RolloutStore, follow_rewards, store_path

log = get_logger(__name__)


# Rollout samples reach their job through the reward service (sy.rewards) and batch lines through
# the batch collector: no connection or async request here waits on them.
JOBS_ANSWERED_ELSEWHERE = ("rollout", "batch")


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    replies = ReplyRouter()
    store = ResultStore(settings.var_dir / "gateway" / f"{settings.instance_id}.sqlite")
    requests_topic = settings.topic("requests")
    signer = ServiceSigner(settings)
    responses_topic, stream_topic = settings.topic("responses"), settings.topic("stream")
    reader_ready = asyncio.Event()
    reply_guard: list[FetchWaitGuard] = []  # the reply reader's, once it runs

    async def submit(env: Envelope, topic: str | None = None) -> None:
        """To sy.requests, or to `topic` when the gateway prepared the request itself."""
        refuse_oversized(env, settings.max_record_bytes)  # every path in: chat, async, rollouts
        rec: OutRecord = out_record(Emit(topic or requests_topic, env))
        await producer.send(signer.sign(rec))  # signed: preprocess may require it (issue 33)
        for guard in reply_guard:
            guard.wake()  # an answer is coming: no idle fetch wait on the reply reader

    async def read_replies(stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(
            **client_kwargs(settings),  # type: ignore[arg-type]
            group_id=None,
            enable_auto_commit=False,
            # An offset out of range means the broker lost its data (embedded restart): read from
            # the start rather than skip replies written while the reset is resolved.
            auto_offset_reset="earliest",
            fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
            max_partition_fetch_bytes=settings.kafka_max_request_bytes,
            client_id=f"gateway-{settings.instance_id}",
        )
        await consumer.start()
        try:
            await consumer.topics()  # refresh metadata
            tps = [
                TopicPartition(t, p)
                for t in (responses_topic, stream_topic)
                for p in sorted(consumer.partitions_for_topic(t) or [])
            ]
            consumer.assign(tps)
            saved = store.offsets()
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                at = saved.get((tp.topic, tp.partition))
                if tp.topic == responses_topic and at is not None and at <= ends.get(tp, 0):
                    consumer.seek(tp, at)  # resume: async results written meanwhile
                elif tp.topic == responses_topic and at is not None:
                    # Saved past the end: the broker was reset (the embedded one starts empty), so
                    # everything on it is newer than our offsets.
                    await consumer.seek_to_beginning(tp)
                else:
                    await consumer.seek_to_end(tp)
            reader_ready.set()
            guard = FetchWaitGuard.from_settings(consumer, "gateway", settings)
            reply_guard[:] = [guard]
            last_save = last_expire = time.monotonic()
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=100)
                guard.observe(bool(batch))
                rewind_reset_logs(consumer, "gateway")
                for tp, records in batch.items():
                    for rec in records:
                        if tp.topic == stream_topic:
                            try:
                                replies.on_delta(StreamDelta.FromString(rec.value))
                            except Exception:  # noqa: BLE001 - not ours to fail on
                                continue
                            continue
                        if header(rec.headers, JOB_HEADER) in JOBS_ANSWERED_ELSEWHERE:
                            continue
                        try:
                            env = decode(rec.value)
                        except Rejected:
                            continue
                        if not replies.on_response(env, sent_ns(rec) or 0) and store.is_pending(
                            env.request_id, env.tenant
                        ):
                            status, result = async_result(env)
                            store.finish(env.request_id, env.tenant, status, result)
                if time.monotonic() - last_save > 1.0:
                    last_save = time.monotonic()
                    if last_save - last_expire > 60:
                        last_expire = last_save
                        store.expire(settings.gateway_results_ttl_s)
                    store.save_offsets(
                        {
                            (tp.topic, tp.partition): await consumer.position(tp)
                            for tp in tps
                            if tp.topic == responses_topic
                        }
                    )
        finally:
            await consumer.stop()

    async def resubmit(stop: asyncio.Event) -> None:
        """Async requests without an answer long after their last send go again (at-least-once:
        the first answer wins, so a client sees one); after SY_GATEWAY_RESUBMIT_MAX sends they
        are reported failed with the reason."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=settings.gateway_resubmit_interval_s)
            except TimeoutError:
                pass
            if stop.is_set() or not reader_ready.is_set():
                continue
            for rid, tenant, payload, attempts in store.stale(settings.gateway_resubmit_after_s):
                if payload is None or attempts >= settings.gateway_resubmit_max:
                    reason = f"no answer after {attempts} submissions of the request"
                    store.finish(rid, tenant, "failed", {"error": {"code": "lost", "message": reason}})
                    log.warning("async request given up", request_id=rid, attempts=attempts)
                    continue
                try:
                    await submit(decode(payload))
                    store.submitted(rid)
                    log.info("async request resubmitted", request_id=rid, attempt=attempts + 1)
                except Exception as exc:  # noqa: BLE001 - the broker may be down: next round
                    log.warning("resubmit failed", request_id=rid, error=repr(exc))
                    break

    registry = RegistryClient(settings)
    rollouts = RolloutStore(store_path(settings))
    peek = CachePeek(settings) if settings.cache_peek_url and settings.cache_enabled else None
    preparer = TextPreparer(settings) if settings.gateway_prepare_text else None
    if preparer is not None:
        preparer.warm(settings.vllm_model)
    backend = Backend(
        settings=settings,
        submit=submit,
        replies=replies,
        store=store,
        ready=reader_ready.is_set,
        resolve_adapter=registry.resolve,
        list_adapters=registry.list_visible,
        draining=lambda: health.draining,
        rollouts=rollouts,
        peek=peek,
        prepare=preparer.prepare if preparer is not None else None,
    )
    health.add_check("reply_reader", reader_ready.is_set)
    app = BodyLimit(create_app(backend), settings.gateway_max_body_bytes)

    async def read_rewards(stop: asyncio.Event) -> None:
        await follow_rewards(settings, rollouts, stop)

    async def open_requests_answered() -> None:
        """SIGTERM: requests held open get their replies (the reply reader still runs) before
        the reader stops; new ones are refused with 503 meanwhile. Async ones need no wait: they
        are in the accepted log and any gateway answers them."""
        if backend.in_flight.used(""):
            log.info("waiting for open requests", n=backend.in_flight.used(""))
        while backend.in_flight.used(""):  # noqa: ASYNC110 - a counter the API shares; polled
            await asyncio.sleep(0.05)

    return Service(
        [],
        background=[read_replies, resubmit, read_rewards],
        app=app,
        on_drain=[open_requests_answered],
        on_stop=[peek.close] if peek is not None else [],
    )


def main() -> None:
    run_service(
        "gateway",
        build,
        secrets=lambda s: HeldSecrets(tenant_keys=s.api_keys, token=s.internal_token.get_secret_value()),
    )


if __name__ == "__main__":
    main()
