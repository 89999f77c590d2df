"""`switchyard up` on the embedded broker: one partition per topic unless SY_TOPIC_PARTITIONS says
otherwise (shared/devstack/wiring.py EMBEDDED_TOPIC_PARTITIONS: the broker pays per partition on every
poll, and the launcher starts one consumer per group), and the services are told the same."""

from __future__ import annotations

import os
from pathlib import Path

from aiokafka import AIOKafkaConsumer

from shared.devstack import launcher as launcher_mod
from shared.runtime.config import Settings
from shared.runtime.procs import free_port


async def partitions_of_topics(tmp_path: Path, **kw: object) -> tuple[dict[str, int], dict[str, str]]:
    up = launcher_mod.Launcher(
        Settings(var_dir=tmp_path, kafka_port=free_port(), **kw),
        services=["router"],
        out=open(os.devnull, "w"),  # noqa: SIM115
    )
    try:
        await up.start_broker()
        consumer = AIOKafkaConsumer(bootstrap_servers=up.bootstrap)
        await consumer.start()
        try:
            topics = {t for t in await consumer.topics() if t.startswith("sy.")}
            counts = {t: len(consumer.partitions_for_topic(t) or ()) for t in topics}
        finally:
            await consumer.stop()
        return counts, up._env_for("router", 9103)
    finally:
        if up.kafka is not None:
            up.kafka.stop()


async def test_the_embedded_brokers_topics_have_one_partition(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SY_TOPIC_PARTITIONS", raising=False)
    counts, env = await partitions_of_topics(tmp_path)
    assert counts and set(counts.values()) == {1}, counts
    assert env["SY_TOPIC_PARTITIONS"] == "1"


async def test_partitions_set_by_the_user_are_kept_on_the_embedded_broker(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SY_TOPIC_PARTITIONS", raising=False)
    counts, env = await partitions_of_topics(tmp_path, topic_partitions=3)
    assert counts["sy.infer.vllm"] == 3 and counts["sy.heartbeats"] == 1, counts
    assert env["SY_TOPIC_PARTITIONS"] == "3"
