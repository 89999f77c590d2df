"""The preprocess stage: pin the adapter, fan rollouts out, check and store media, prepare tokens.

No Kafka here: main.py feeds it envelopes from sy.requests; what it emits goes to sy.prepared
(the cache), or sy.routing where the cache could never answer, or an error reply.
"""

from __future__ import annotations

from shared.adapters.registry_client import RegistryClient
from shared.prepare import Preprocessor, TokenCounter, next_topic
from shared.rewards import default_functions, triton_url_of
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Kind, Rejected, set_error
from shared.runtime.stage import Emit
from shared.runtime.storage import ObjectStore

from .adapters import AdapterPinner
from .media_stage import MediaStage
from .rollouts import fan_out


class PreprocessStage:
    """One request in, one (or, for a rollout job, one per group) prepared envelope out."""

    def __init__(self, settings: Settings, registry: RegistryClient, objects: ObjectStore) -> None:
        self.settings = settings
        self.pre = Preprocessor(TokenCounter(settings.model_dir))
        self.pinner = AdapterPinner({m for p in settings.pools for m in p.models}, registry.resolve)
        self.media = MediaStage(settings, objects)
        self.responses = settings.topic("responses")
        self.reward_functions = default_functions(triton_url_of(settings))  # to check rollout reward specs

    def refused(self, env: Envelope, exc: Rejected, drop_input: bool = False) -> list[Emit]:
        """The error reply for a request refused here."""
        if drop_input:  # the reply needs the reason, not the (possibly large) media input
            env.ClearField("request")
        return [Emit(self.responses, set_error(env, exc.code, exc.reason, "preprocess", exc.http_status))]

    async def handle(self, env: Envelope) -> list[Emit]:
        try:
            await self.pinner.pin(env)
        except Rejected as exc:  # an unknown adapter is an answer, not a poison record
            return self.refused(env, exc)
        if env.kind == Kind.KIND_ROLLOUT:  # text prompts fanned out into samples (no media)
            return [
                Emit(next_topic(g, self.settings), self.pre.prepare(g))
                for g in fan_out(env, self.settings.rollout_max_prompts, self.reward_functions)
            ]
        try:
            found = await self.media.analyse(env)  # checks and normalises; writes nothing yet
            self.pre.prepare(env, media_checked=True)
            self.media.check_context(env, found, env.tokens.prompt_text if env.tokens.tokenizer else None)
        except Rejected as exc:  # bad media or an oversized prompt: answered, nothing stored
            return self.refused(env, exc, drop_input=True)
        await self.media.commit(env, found)  # stores blobs only for a request that passed every check
        return [Emit(next_topic(env, self.settings), env)]
