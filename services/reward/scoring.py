"""The reward stage: a finished rollout group in, its sample and group records out (no Kafka here)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping

from prometheus_client import Counter, Histogram

from shared.rewards import RewardFunction, score_group
from shared.runtime.envelope import Envelope, Kind
from shared.runtime.telemetry import get_logger

from .groups import (
    CurrentVersion,
    GroupOutput,
    build_records,
    error_record,
    samples_of,
    spec_items,
    staleness,
)

log = get_logger(__name__)

SAMPLES = Counter("sy_reward_samples_total", "Rollout samples scored and published")
TOKENS = Counter("sy_reward_tokens_total", "Completion tokens of the scored samples")
GROUPS = Counter("sy_reward_groups_total", "Rollout groups published, by outcome", ["outcome"])
DUPLICATES = Counter("sy_reward_duplicates_total", "Redelivered groups dropped (already on sy.rewards)")
SCORING_SECONDS = Histogram(
    "sy_reward_scoring_seconds",
    "Reward latency: time in reward functions per group",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
GROUP_COMPLETION_SECONDS = Histogram(
    "sy_reward_group_completion_seconds",
    "Group completion time: job accepted -> group scored",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
REWARD_VALUE = Histogram(
    "sy_reward_value", "Combined reward per sample", buckets=(-1, -0.5, 0, 0.25, 0.5, 0.75, 1, 2)
)
STALENESS = Histogram(
    "sy_reward_staleness", "Policy versions behind the alias at scoring", buckets=(0, 1, 2, 4, 8, 16)
)


class Published:
    """The records already on sy.rewards, groups and samples (bounded, oldest forgotten first).

    Keyed by (tenant, request id): rollout ids are the client's (`ro-<rollout_id>`), so two
    tenants' jobs with the same id have the same group and sample request ids (DESIGN §6)."""

    def __init__(self, capacity: int = 1_000_000) -> None:
        self._ids: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.capacity = capacity

    def __contains__(self, env: Envelope) -> bool:
        return (env.tenant, env.request_id) in self._ids

    def add(self, env: Envelope) -> None:
        key = (env.tenant, env.request_id)
        self._ids[key] = None
        self._ids.move_to_end(key)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ids)


def is_group_record(env: Envelope) -> bool:
    return env.rollout.HasField("group")


class RewardStage:
    def __init__(
        self, functions: Mapping[str, RewardFunction], current: CurrentVersion, published: Published
    ) -> None:
        self.functions = functions
        self.current = current
        self.published = published

    async def handle(self, env: Envelope) -> GroupOutput | Envelope | None:
        """None: not ours, or already published. An Envelope: the group failed upstream."""
        if env.kind != Kind.KIND_ROLLOUT:
            return None
        if not env.rollout.rollout_id:
            if not env.error.code:
                return None
            env.rollout.rollout_id = env.request_id  # a job refused before fan-out (Kafka producer, no id)
        if env in self.published:
            DUPLICATES.inc()
            log.info("group already published; redelivery dropped", request_id=env.request_id)
            return None
        if env.error.code:
            GROUPS.labels("error").inc()
            return error_record(env)
        items = spec_items(env)
        t0 = time.perf_counter()
        scored = await score_group(samples_of(env), items, self.functions)
        scoring_s = time.perf_counter() - t0
        stale = await staleness(env, self.current)
        out = build_records(env, scored, stale, scoring_s * 1000)
        # A crash between acks can leave some sample records of a group on the topic and not
        # its group record (which goes last): publish only the missing ones.
        out.samples = [s for s in out.samples if s not in self.published]
        SCORING_SECONDS.observe(scoring_s)
        GROUP_COMPLETION_SECONDS.observe(out.group.rollout.group.completion_ms / 1000)
        STALENESS.observe(stale)
        for s in scored:
            REWARD_VALUE.observe(s.reward)
        return out

    def published_ok(self, result: GroupOutput | Envelope) -> None:
        """After the broker acknowledged the records: remember the group, count the samples."""
        group = result.group if isinstance(result, GroupOutput) else result
        if isinstance(result, GroupOutput):
            for s in result.samples:
                self.published.add(s)
        self.published.add(group)
        if isinstance(result, GroupOutput):
            GROUPS.labels("ok").inc()
            SAMPLES.inc(len(result.samples))
            TOKENS.inc(sum(s.response.usage.completion_tokens for s in result.samples))


class PolicyVersions:
    """Where a policy alias points now, from the registry, cached for `ttl_s`."""

    def __init__(self, resolve: object, ttl_s: float = 1.0) -> None:
        self._resolve = resolve
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str, str], tuple[float, int | None]] = {}

    async def __call__(self, tenant: str, name: str, alias: str) -> int | None:
        key = (tenant, name, alias)
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        try:
            manifest = await self._resolve(tenant, f"{name}@{alias}")  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001 - staleness is advisory; keep the last answer
            log.warning("registry unavailable; staleness from the last known alias", error=str(exc))
            return hit[1] if hit else None
        version = int(manifest.version) if manifest is not None else None
        self._cache[key] = (now, version)
        return version
