"""The reward service's handlers: rollout groups from sy.responses in, records for sy.rewards out.

No Kafka here: main.py feeds it envelopes, dead letters and the records read back from
sy.rewards. Scoring is scoring.py (RewardStage); this class adds the crash-safety rules
(groups.py): nothing is handled before sy.rewards has been read (`caught_up`), a record is
marked published before the bus sends it, and a group that cannot be scored still completes.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka.structs import ConsumerRecord
from switchyard.v1.events_pb2 import DeadLetter

from shared.adapters.registry_client import RegistryClient
from shared.rewards import default_functions, triton_url_of
from shared.rewards.sandbox import isolation
from shared.runtime.bus import CONTENT_TYPE_HEADER, OutRecord, header, rollout_envelopes
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Kind, Rejected, decode, set_error
from shared.runtime.stage import Emit, out_record
from shared.runtime.telemetry import get_logger

from .groups import GroupOutput, error_record
from .scoring import PolicyVersions, Published, RewardStage

log = get_logger(__name__)


async def log_isolation(settings: Settings) -> None:
    """Say once at start how code_tests programs are isolated (or that they are refused)."""
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


class RewardHandler:
    """Scores rollout groups once the set of groups already on sy.rewards is known."""

    def __init__(self, settings: Settings, registry: RegistryClient, caught_up: asyncio.Event) -> None:
        self.registry = registry
        self.rewards = settings.topic("rewards")
        self.functions = default_functions(triton_url_of(settings))
        self.published = Published(settings.reward_dedupe_capacity)
        versions = PolicyVersions(registry.resolve, settings.reward_policy_ttl_s)
        self.stage = RewardStage(self.functions, versions, self.published)
        # Set once sy.rewards was read to its end: the event of main.py's follower of that topic.
        self.caught_up = caught_up
        self._t0, self._rebuilt = time.monotonic(), False

    async def handle(self, env: Envelope) -> list[Emit]:
        """sy.responses: a finished rollout group's records, or nothing."""
        if env.kind != Kind.KIND_ROLLOUT:
            return []
        await self.caught_up.wait()
        result = await self.stage.handle(env)
        if result is None:
            return []
        # Marked before the bus publishes: it retries until acknowledged (or the process ends,
        # and then the next start rebuilds the set from the topic).
        self.stage.published_ok(result)
        records = result.all if isinstance(result, GroupOutput) else [result]
        return [Emit(self.rewards, e, key=e.rollout.rollout_id) for e in records]

    def on_dead(self, rec: ConsumerRecord, dl: DeadLetter) -> list[OutRecord]:
        """A group that cannot be scored still completes: a group record with the reason."""
        try:
            env = decode(rec.value, header(rec.headers, CONTENT_TYPE_HEADER))
        except Rejected:
            return []
        if env.kind != Kind.KIND_ROLLOUT or env in self.published:
            return []
        env.rollout.rollout_id = env.rollout.rollout_id or env.request_id
        dl.request_id, dl.tenant = env.request_id, env.tenant
        set_error(env, dl.error_code, dl.reason, "reward", 500)
        out = error_record(env)
        self.published.add(out)
        return [out_record(Emit(self.rewards, out, key=out.rollout.rollout_id))]

    def on_rewards(self, records: list[ConsumerRecord]) -> None:
        """Records read back from sy.rewards (a poll's, maybe none): their groups and samples are
        published. Once `caught_up` is set the dedupe set is whole; that is logged once."""
        for env in rollout_envelopes(records):
            self.published.add(env)
        if self.caught_up.is_set() and not self._rebuilt:
            self._rebuilt = True
            log.info(
                "sy.rewards read; dedupe set rebuilt",
                records=len(self.published),
                seconds=round(time.monotonic() - self._t0, 3),
            )

    async def aclose(self) -> None:
        await self.registry.aclose()
        rm = self.functions.get("reward_model")
        if rm is not None and hasattr(rm, "aclose"):
            await rm.aclose()
