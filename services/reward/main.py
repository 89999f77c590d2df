"""reward: sy.responses (rollout groups) -> sy.rewards (process wiring only).

Crash safety (see groups.py): a group is one record, published whole before its offset is
committed; the set of groups already on sy.rewards is rebuilt by reading that topic before
the first record is handled, and kept current by following it, so a redelivery after a
SIGKILL (or another instance's) publishes nothing twice.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import DeadLetter

from shared.adapters.registry_client import RegistryClient
from shared.rewards import default_functions, triton_url_of
from shared.rewards.sandbox import isolation
from shared.runtime.bus import (
    CONTENT_TYPE_HEADER,
    OutRecord,
    Producer,
    client_kwargs,
    header,
    off_path_wait_ms,
)
from shared.runtime.config import Settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.embedded_broker import FetchWaitGuard, rewind_reset_logs
from shared.runtime.envelope import Envelope, Kind, Rejected, decode, set_error
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import Emit, envelope_handler, out_record
from shared.runtime.telemetry import get_logger

from .groups import GroupOutput, error_record
from .scoring import PolicyVersions, Published, RewardStage

log = get_logger(__name__)


async def follow_rewards(
    settings: Settings, published: Published, caught_up: asyncio.Event, stop: asyncio.Event
) -> None:
    """Read sy.rewards from the start (all partitions, no group) into `published`."""
    topic = settings.topic("rewards")
    consumer = AIOKafkaConsumer(
        **client_kwargs(settings),  # type: ignore[arg-type]
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=max(settings.kafka_fetch_max_wait_ms, 20),
        max_partition_fetch_bytes=settings.kafka_max_request_bytes,
        client_id=f"reward-follow-{settings.instance_id}",
    )
    await consumer.start()
    try:
        parts: set[int] = set()
        while not parts and not stop.is_set():
            await consumer.topics()
            parts = consumer.partitions_for_topic(topic) or set()
            if not parts:
                await asyncio.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        t0, empty = time.monotonic(), 0
        guard = FetchWaitGuard.from_settings(consumer, "reward-follow", settings)
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100)
            guard.observe(bool(batch))
            rewind_reset_logs(consumer, "reward-follow")
            for records in batch.values():
                for rec in records:
                    try:
                        env = decode(rec.value, header(rec.headers, CONTENT_TYPE_HEADER))
                    except Rejected:
                        continue
                    if env.rollout.rollout_id:
                        published.add(env)
            if not caught_up.is_set():
                empty = 0 if batch else empty + 1
                at_end = True
                for tp in tps:
                    hw = consumer.highwater(tp)
                    at_end = at_end and hw is not None and await consumer.position(tp) >= hw
                if at_end or empty >= 20:
                    caught_up.set()
                    log.info(
                        "sy.rewards read; dedupe set rebuilt",
                        records=len(published),
                        seconds=round(time.monotonic() - t0, 3),
                    )
    finally:
        await consumer.stop()


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    if settings.sandbox_url:
        log.info("code_tests programs run in the sandbox runner", url=settings.sandbox_url)
    elif wrapper := await asyncio.to_thread(isolation):
        log.info("code sandbox isolation", layers=" ".join(wrapper))
    elif settings.sandbox_allow_weak:
        log.warning(
            "code sandbox WITHOUT OS isolation (SY_SANDBOX_ALLOW_WEAK): rlimits and an audit hook only"
        )
    else:
        log.warning(
            "no OS isolation for code_tests (bubblewrap missing or refused): it answers sandbox_unavailable"
        )
    registry = RegistryClient(settings)
    functions = default_functions(triton_url_of(settings))
    published = Published(settings.reward_dedupe_capacity)
    stage = RewardStage(functions, PolicyVersions(registry.resolve, settings.reward_policy_ttl_s), published)
    rewards = settings.topic("rewards")
    caught_up = asyncio.Event()
    health.add_check("rewards_followed", caught_up.is_set)

    def emits(records: list[Envelope]) -> list[Emit]:
        return [Emit(rewards, e, key=e.rollout.rollout_id) for e in records]

    async def handle(env: Envelope) -> list[Emit]:
        if env.kind != Kind.KIND_ROLLOUT:
            return []
        await caught_up.wait()
        result = await stage.handle(env)
        if result is None:
            return []
        # Marked before the bus publishes: it retries until acknowledged (or the process ends,
        # and then the next start rebuilds the set from the topic).
        stage.published_ok(result)
        return emits(result.all if isinstance(result, GroupOutput) else [result])

    def on_dead(rec: ConsumerRecord, dl: DeadLetter) -> list[OutRecord]:
        """A group that cannot be scored still completes: a group record with the reason."""
        try:
            env = decode(rec.value, header(rec.headers, CONTENT_TYPE_HEADER))
        except Rejected:
            return []
        if env.kind != Kind.KIND_ROLLOUT or env in published:
            return []
        env.rollout.rollout_id = env.rollout.rollout_id or env.request_id
        dl.request_id, dl.tenant = env.request_id, env.tenant
        set_error(env, dl.error_code, dl.reason, "reward", 500)
        out = error_record(env)
        published.add(out)
        return [out_record(Emit(rewards, out, key=out.rollout.rollout_id))]

    consumer = StageConsumer(
        stage="reward",
        topics=[settings.topic("responses")],
        group_id=f"{settings.topic_prefix}reward",
        # Error replies reach sy.responses with their request cleared: read them as they are.
        handler=envelope_handler("reward", handle, validate_input=False, jobs=("rollout",)),
        producer=producer,
        settings=settings,
        # Off the reply path: no client waits on a reward within milliseconds, and every held fetch
        # on the embedded broker polls (this reader took 7-9 % of the services' core while idle).
        fetch_max_wait_ms=off_path_wait_ms(settings),
        dlq_topic=settings.topic("dlq"),
        on_dead=on_dead,  # never an error reply on sy.responses: this stage reads that topic
    )

    async def follow(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await follow_rewards(settings, published, caught_up, stop)
            except Exception as exc:  # noqa: BLE001 - reread from the start; the set only grows
                log.warning("sy.rewards follower failed; rereading", error=repr(exc))
                await asyncio.sleep(1.0)

    async def close() -> None:
        await registry.aclose()
        rm = functions.get("reward_model")
        if rm is not None and hasattr(rm, "aclose"):
            await rm.aclose()

    return Service([consumer], background=[follow], on_stop=[close])


def main() -> None:
    run_service("reward", build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
