"""The topics of the pipeline: names, partitions, keys and schemas (DESIGN.md §1).

This list is the one source for topic creation (launcher), the AsyncAPI document and the
deployment checks; services name topics through `Settings.topic()` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from shared.runtime.config import Settings


@dataclass(frozen=True)
class TopicSpec:
    suffix: str
    key: str
    schema: str
    description: str
    partitions: int | None = None  # None: SY_TOPIC_PARTITIONS
    compacted: bool = False


BASE_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(
        "requests",
        "request_id",
        "switchyard.v1.Envelope",
        "Ingest from the gateway, Kafka producers and batch jobs; JSON accepted (content-type: application/json)",
    ),
    TopicSpec(
        "prepared",
        "request_id",
        "switchyard.v1.Envelope",
        "Validated requests with media stored and tokens counted",
    ),
    TopicSpec(
        "routing",
        "request_id",
        "switchyard.v1.Envelope",
        "Requests waiting for a pool decision: cache misses, and those the cache could not answer",
    ),
    TopicSpec("stream", "request_id", "switchyard.v1.StreamDelta", "Token deltas of streaming requests"),
    TopicSpec(
        "responses", "request_id", "switchyard.v1.Envelope", "Final responses and errors, with timings"
    ),
    TopicSpec(
        "heartbeats", "worker_id", "switchyard.v1.Heartbeat", "Worker live state for the router", partitions=1
    ),
    TopicSpec(
        "adapters",
        "adapter name",
        "switchyard.v1.AdapterEvent",
        "Adapter published/aliased/deleted events",
        1,
        True,
    ),
    TopicSpec(
        "cache.purges",
        "tenant",
        "switchyard.v1.CachePurge",
        "Purges made through a cache replica's API: every replica drops them from its in-memory exact tier",
        1,
    ),
    TopicSpec(
        "rewards", "rollout_id", "switchyard.v1.Envelope", "Scored rollout samples and group advantages"
    ),
    TopicSpec(
        "dlq", "original key", "switchyard.v1.DeadLetter", "Records a stage could not handle, with the reason"
    ),
)


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    spec: TopicSpec


def all_topics(settings: Settings) -> list[Topic]:
    """Every topic with its full name: the fixed ones plus one `infer.<pool>` per pool."""
    specs = list(BASE_TOPICS)
    for pool in settings.pools:
        specs.append(
            TopicSpec(
                pool.topic_suffix,
                "adapter (affinity)",
                "switchyard.v1.Envelope",
                f"Requests for the {pool.engine} pool {pool.name!r}",
            )
        )
    return [Topic(settings.topic(s.suffix), s.partitions or settings.topic_partitions, s) for s in specs]


# Record-batch framing on top of the largest record a stage accepts.
_BATCH_OVERHEAD = 16 * 1024


def topic_configs(t: Topic, settings: Settings) -> dict[str, str]:
    """Broker-side limits: every topic refuses records over SY_MAX_RECORD_BYTES (plus batch
    framing), so on Apache Kafka an oversized record from an outside producer is refused at
    produce time, before any stage reads it. (The embedded broker ignores topic configs; there
    the first stage dead-letters such a record, once.)"""
    configs = {"max.message.bytes": str(settings.max_record_bytes + _BATCH_OVERHEAD)}
    if t.spec.compacted:
        configs["cleanup.policy"] = "compact"
    return configs


async def ensure_topics(admin: AIOKafkaAdminClient, settings: Settings) -> list[str]:
    """Create the missing topics; return the names created. Safe to repeat."""
    existing = set(await admin.list_topics())
    new = [
        NewTopic(
            t.name,
            t.partitions,
            settings.topic_replication_factor,
            topic_configs=topic_configs(t, settings),
        )
        for t in all_topics(settings)
        if t.name not in existing
    ]
    if not new:
        return []
    resp = await admin.create_topics(new)
    created = []
    for name, code, message in getattr(resp, "topic_errors", []):
        if code == 0:
            created.append(name)
        elif code != 36:  # TOPIC_ALREADY_EXISTS: another process won the race
            raise RuntimeError(f"could not create topic {name}: error {code} {message}")
    return created
