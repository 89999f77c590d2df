"""Bus benchmarks on the embedded broker.

- hop latency: records produced at a steady rate through shared.runtime.bus.Producer, consumed by a
  shared.runtime.bus.StageConsumer; latency = consume time - the producer's sent-ns header. Swept over
  SY_KAFKA_FETCH_MAX_WAIT_MS, which sets the per-hop floor on this broker.
- stage throughput: a backlog of envelopes on sy.routing drained by the real router service
  process; records/s from the first to the last output's sent time.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from switchyard.v1.envelope_pb2 import ChatMessage, Request

from shared.devstack.embedded.kafka import EmbeddedKafka
from shared.runtime.bus import OutRecord, Producer, sent_ns
from shared.runtime.config import load_settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.envelope import Envelope, Kind, encode
from shared.runtime.kafka_admin import create_topics
from shared.runtime.procs import free_port, stop_process

from .harness.report import pct
from .harness.stack import ROOT


def envelope(i: int, pad: int = 800) -> Envelope:
    return Envelope(
        request_id=f"b-{i}",
        tenant="bench",
        kind=Kind.KIND_CHAT,
        model="sy-tiny",
        request=Request(messages=[ChatMessage(role="user", content="x" * pad)]),
    )


async def hop_latency(
    bootstrap: str, fetch_wait_ms: int, rate: int, n: int, linger_ms: int = 0
) -> dict[str, float]:
    prefix = f"lat{fetch_wait_ms}l{linger_ms}."
    s = load_settings(
        kafka_bootstrap=bootstrap,
        topic_prefix=prefix,
        kafka_fetch_max_wait_ms=fetch_wait_ms,
        kafka_linger_ms=linger_ms,
        kafka_session_timeout_ms=2000,
        kafka_heartbeat_interval_ms=500,
    )
    await create_topics(s)
    lat: list[float] = []
    done = asyncio.Event()

    async def handler(rec):  # type: ignore[no-untyped-def]
        lat.append((time.time_ns() - (sent_ns(rec) or 0)) / 1e6)
        if len(lat) >= n:
            done.set()
        return []

    producer = Producer(s)
    await producer.start()
    consumer = StageConsumer(
        stage="bench",
        topics=[s.topic("requests")],
        group_id=f"{prefix}bench",
        handler=handler,
        producer=producer,
        settings=s,
        dlq_topic=s.topic("dlq"),
    )
    task = asyncio.create_task(consumer.run())
    while not consumer.assigned():
        await asyncio.sleep(0.05)
    value = encode(envelope(0))
    interval = 1.0 / rate
    t0 = time.perf_counter()
    for i in range(n):
        await producer.send(OutRecord(s.topic("requests"), value, key=str(i).encode()))
        delay = t0 + (i + 1) * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.wait_for(done.wait(), timeout=60)
    await consumer.stop()
    await task
    await producer.stop()
    return {
        "fetch_max_wait_ms": fetch_wait_ms,
        "linger_ms": linger_ms,
        "rate_per_s": rate,
        "records": len(lat),
        "p50_ms": round(pct(lat, 0.5), 3),
        "p90_ms": round(pct(lat, 0.9), 3),
        "p99_ms": round(pct(lat, 0.99), 3),
        "mean_ms": round(statistics.fmean(lat), 3),
    }


async def stage_throughput(bootstrap: str, n: int, max_in_flight: int, var_dir: Path) -> dict[str, float]:
    prefix = f"thr{max_in_flight}."
    s = load_settings(kafka_bootstrap=bootstrap, topic_prefix=prefix)
    await create_topics(s)
    producer = Producer(s)
    await producer.start()
    batch = [OutRecord(s.topic("routing"), encode(envelope(i)), key=f"b-{i}".encode()) for i in range(n)]
    for i in range(0, n, 1000):
        await producer.send_all(batch[i : i + 1000])
    await producer.stop()

    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    env.update(
        SY_ENV="dev",
        SY_KAFKA_BOOTSTRAP=bootstrap,
        SY_TOPIC_PREFIX=prefix,
        SY_HEALTH_PORT=str(free_port()),
        SY_STAGE_MAX_IN_FLIGHT=str(max_in_flight),
        SY_KAFKA_SESSION_TIMEOUT_MS="2000",
        SY_KAFKA_HEARTBEAT_INTERVAL_MS="500",
        SY_LOG_LEVEL="WARNING",
        SY_VAR_DIR=str(var_dir),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.router.main"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    from aiokafka import AIOKafkaConsumer

    c = AIOKafkaConsumer(
        s.topic("infer.vllm"),
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        enable_auto_commit=False,
    )
    await c.start()
    sent: list[int] = []
    deadline = time.monotonic() + 300
    while len(sent) < n and time.monotonic() < deadline:
        for recs in (await c.getmany(timeout_ms=200)).values():
            sent.extend(sent_ns(r) or 0 for r in recs)
    await c.stop()
    stop_process(proc)
    span_s = (max(sent) - min(sent)) / 1e9
    return {
        "max_in_flight": max_in_flight,
        "records": len(sent),
        "seconds": round(span_s, 3),
        "records_per_s": round(len(sent) / span_s, 1) if span_s > 0 else None,
    }


async def run(out: Path, quick: bool = False) -> dict[str, object]:
    var_dir = out / "var"
    kafka = EmbeddedKafka(var_dir)
    kafka.start()
    try:
        n_lat = 300 if quick else 2000
        n_thr = 2000 if quick else 20000
        latency = [await hop_latency(kafka.bootstrap, w, rate=200, n=n_lat) for w in (5, 10, 20, 50)]
        # The producer's linger (SY_KAFKA_LINGER_MS, default 0) at the default fetch wait: 1 ms was
        # the default before; each hop paid it in full at low rates.
        lingered = await hop_latency(kafka.bootstrap, 5, rate=200, n=n_lat, linger_ms=1)
        throughput = [await stage_throughput(kafka.bootstrap, n_thr, m, var_dir) for m in (1, 64)]
    finally:
        kafka.stop()
    return {
        "scenario": "bus",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "record_bytes": len(encode(envelope(0))),
        "hop_latency": latency,
        "hop_latency_linger_1ms": lingered,
        "router_throughput": throughput,
        "summary": {
            "hop_p50_p99_ms_by_fetch_wait": {
                r["fetch_max_wait_ms"]: [r["p50_ms"], r["p99_ms"]] for r in latency
            },
            "hop_p50_p99_ms_at_5ms_by_linger": {
                0: [latency[0]["p50_ms"], latency[0]["p99_ms"]],
                1: [lingered["p50_ms"], lingered["p99_ms"]],
            },
            "router_records_per_s_by_in_flight": {r["max_in_flight"]: r["records_per_s"] for r in throughput},
        },
    }
