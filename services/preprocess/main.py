"""preprocess: sy.requests -> sy.prepared (the cache), or sy.routing where the cache could never
answer (process wiring only)."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from shared.adapters.registry_client import RegistryClient
from shared.prepare import Preprocessor, TokenCounter, next_topic
from shared.rewards import default_functions, triton_url_of
from shared.runtime.bus import Producer
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Kind, Rejected, set_error
from shared.runtime.health import Health
from shared.runtime.ingest_auth import IngestVerifier
from shared.runtime.production import HeldSecrets
from shared.runtime.service import Service, run_service
from shared.runtime.stage import Emit, RecordCheck, envelope_consumer
from shared.runtime.storage import open_store
from shared.runtime.telemetry import get_logger

from .adapters import AdapterPinner
from .media_stage import MediaStage
from .rollouts import fan_out

log = get_logger(__name__)


async def build(settings: Settings, producer: Producer, health: Health) -> Service:
    pre = Preprocessor(TokenCounter(settings.model_dir))
    registry = RegistryClient(settings)
    pinner = AdapterPinner({m for p in settings.pools for m in p.models}, registry.resolve)
    media = MediaStage(settings, open_store(settings))
    responses = settings.topic("responses")

    reward_functions = default_functions(triton_url_of(settings))  # to check rollout reward specs

    def refused(env: Envelope, exc: Rejected, drop_input: bool = False) -> list[Emit]:
        if drop_input:  # the reply needs the reason, not the (possibly large) media input
            env.ClearField("request")
        return [Emit(responses, set_error(env, exc.code, exc.reason, "preprocess", exc.http_status))]

    async def handle(env: Envelope) -> list[Emit]:
        try:
            await pinner.pin(env)
        except Rejected as exc:  # an unknown adapter is an answer, not a poison record
            return refused(env, exc)
        if env.kind == Kind.KIND_ROLLOUT:  # text prompts fanned out into samples (no media)
            return [
                Emit(next_topic(g, settings), pre.prepare(g))
                for g in fan_out(env, settings.rollout_max_prompts, reward_functions)
            ]
        try:
            found = await media.analyse(env)  # checks and normalises; writes nothing yet
            pre.prepare(env, media_checked=True)
            media.check_context(env, found, env.tokens.prompt_text if env.tokens.tokenizer else None)
        except Rejected as exc:  # bad media or an oversized prompt: answered, nothing stored
            return refused(env, exc, drop_input=True)
        await media.commit(env, found)  # stores blobs only for a request that passed every check
        return [Emit(next_topic(env, settings), env)]

    return Service(
        [
            envelope_consumer(
                "preprocess", "requests", handle, producer, settings, check=ingest_check(settings)
            )
        ]
    )


def ingest_check(settings: Settings) -> RecordCheck | None:
    """The Kafka trust boundary (docs/security.md): with SY_KAFKA_INGEST_AUTH required, a record
    that does not prove its tenant is dead-lettered as `unauthenticated` before anything reads it."""
    if not settings.ingest_auth_required:
        log.warning(
            "kafka ingest is not authenticated: any producer on sy.requests can act as any tenant "
            "(SY_KAFKA_INGEST_AUTH=required in production)"
        )
        return None
    verifier = IngestVerifier.from_settings(settings)

    def check(rec: ConsumerRecord, env: Envelope) -> None:
        verifier.verify(rec.value or b"", rec.headers, env)

    return check


def main() -> None:
    run_service(
        "preprocess",
        build,
        secrets=lambda s: HeldSecrets(
            token=s.internal_token.get_secret_value(),
            signing_secrets={t: v.get_secret_value() for t, v in s.ingest_secrets.items()},
        ),
    )


if __name__ == "__main__":
    main()
