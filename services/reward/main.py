"""reward: sy.responses (rollout groups) -> sy.rewards (process wiring only).

Crash safety (see groups.py): a group is one record, published whole before its offset is
committed; the set of groups already on sy.rewards is rebuilt by reading that topic before
the first record is handled, and kept current by following it, so a redelivery after a
SIGKILL (or another instance's) publishes nothing twice. The handlers are stage.py.
"""

from __future__ import annotations

from shared.adapters.registry_client import RegistryClient
from shared.runtime.bus import Producer, off_path_wait_ms
from shared.runtime.config import Settings
from shared.runtime.consumer import StageConsumer
from shared.runtime.follow import Follower
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import envelope_handler

from .stage import RewardHandler, log_isolation


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    await log_isolation(settings)
    # sy.rewards from the start, all partitions, no group; after an error it is read again from the
    # start (the set only grows). Caught up: at the high watermark, or after 20 empty polls.
    # The handler waits on the follower's `caught_up` and the follower feeds the handler: the
    # callback finds `handler`, built next, when the service runs.
    rewards = Follower(
        settings,
        [settings.topic("rewards")],
        name="reward-follow",
        on_batch=lambda records: handler.on_rewards(records),
        fetch_wait_ms=max(settings.kafka_fetch_max_wait_ms, 20),
    )
    handler = RewardHandler(settings, RegistryClient(settings), rewards.caught_up)
    health.add_check("rewards_followed", handler.caught_up.is_set)
    consumer = StageConsumer(
        stage="reward",
        topics=[settings.topic("responses")],
        group_id=f"{settings.topic_prefix}reward",
        # Error replies reach sy.responses with their request cleared: read them as they are.
        handler=envelope_handler("reward", handler.handle, validate_input=False, jobs=("rollout",)),
        producer=producer,
        settings=settings,
        # Off the reply path: no client waits on a reward within milliseconds, and every held fetch
        # on the embedded broker polls (this reader took 7-9 % of the services' core while idle).
        fetch_max_wait_ms=off_path_wait_ms(settings),
        dlq_topic=settings.topic("dlq"),
        on_dead=handler.on_dead,  # never an error reply on sy.responses: this stage reads that topic
    )
    return Service([consumer], background=[rewards.run], on_stop=[handler.aclose])


def main() -> None:
    run_service("reward", build, secrets=lambda s: HeldSecrets(token=s.internal_token.get_secret_value()))


if __name__ == "__main__":
    main()
