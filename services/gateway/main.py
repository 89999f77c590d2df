"""gateway: REST in, sy.requests out; replies read back from sy.responses and sy.stream."""

from __future__ import annotations

from shared.adapters.registry_client import RegistryClient
from shared.prepare import TextPreparer
from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.health import Health
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service

from .app import create_app
from .backend import Backend
from .cache_peek import CachePeek
from .limits import body_limit
from .publish import Publisher
from .reader import ReplyHandler, ReplyReader
from .replica_state import open_replica_state
from .replies import ReplyRouter
from .requests.resubmit import Resubmitter
from .requests.store import open_result_store
from .rollouts.follow import RewardsReader
from .rollouts.store import RolloutStore, store_path


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    replies = ReplyRouter()
    store = open_result_store(settings)
    shared = open_replica_state(settings)
    reader = ReplyReader(settings, ReplyHandler(settings, replies, store), shared.lease)
    publisher = Publisher(settings, producer, wake=reader.follower.wake, reply_to=shared.reply_to)
    resubmitter = Resubmitter(settings, store, publisher.submit, reader.ready.is_set)
    registry = RegistryClient(settings)
    rollouts = RolloutStore(store_path(settings))
    rewards = RewardsReader(settings, rollouts, shared.claims)
    peek = CachePeek(settings) if settings.cache_peek_url and settings.cache_enabled else None
    preparer = TextPreparer(settings) if settings.gateway_prepare_text else None
    if preparer is not None:
        preparer.warm(settings.vllm_model)
    backend = Backend(
        settings=settings,
        submit=publisher.submit,
        replies=replies,
        store=store,
        ready=reader.ready.is_set,
        resolve_adapter=registry.resolve,
        list_adapters=registry.list_visible,
        draining=lambda: health.draining,
        rollouts=rollouts,
        rollout_claims=shared.claims,
        stream_slots=shared.streams,
        peek=peek,
        prepare=preparer.prepare if preparer is not None else None,
    )
    health.add_check("reply_reader", reader.ready.is_set)
    app = body_limit(create_app(backend), settings.gateway_max_body_bytes)
    return Service(
        [],
        background=[reader.run, resubmitter.run, rewards.run, *shared.background],
        app=app,
        on_drain=[backend.open_requests_answered],
        on_stop=[store.close, *shared.closers, *([peek.close] if peek is not None else [])],
    )


def main() -> None:
    run_service(
        "gateway",
        build,
        secrets=lambda s: HeldSecrets(tenant_keys=s.api_keys, token=s.internal_token.get_secret_value()),
    )


if __name__ == "__main__":
    main()
