"""POST /v1/rollouts and GET /v1/rollouts/{id}: validate, pin the policy, write ONE job record.

`store`: the one the sy.rewards reader fills (so `wait` hears of new records); None opens the
same file without that (tests of the routes alone)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from shared.rewards import SpecItem, check_spec, default_functions, triton_url_of
from shared.runtime.telemetry import get_logger

from ..backend import Backend
from ..deps import Gate
from ..errors import ApiError
from ..models.serving import ModelCatalog
from .claims import Claim
from .protocol import RolloutRequest, rollout_cost, to_job_envelope
from .store import RolloutStore, store_path

log = get_logger(__name__)


class RolloutServing:
    def __init__(self, backend: Backend, gate: Gate, models: ModelCatalog) -> None:
        self.backend, self.gate, self.models, self.settings = backend, gate, models, backend.settings
        self.store = backend.rollouts or RolloutStore(store_path(self.settings))
        self.functions = default_functions(triton_url_of(self.settings))

    def _validate(self, body: RolloutRequest) -> None:
        if len(body.prompts) > self.settings.rollout_max_prompts:
            raise ApiError(
                400,
                f"at most {self.settings.rollout_max_prompts} prompts per rollout (SY_ROLLOUT_MAX_PROMPTS)",
                "invalid_request",
                "prompts",
            )
        try:
            check_spec(
                [SpecItem(f.name, f.weight, f.params_text()) for f in body.reward.functions], self.functions
            )
        except ValueError as exc:
            raise ApiError(400, str(exc), "invalid_request", "reward.functions") from None

    async def create(self, body: RolloutRequest, tenant: str, idempotency_key: str | None) -> dict[str, Any]:
        """Start a rollout job: n samples per prompt from the policy, scored by the reward spec."""
        s, store = self.settings, self.store
        self._validate(body)
        key = body.rollout_id or idempotency_key
        rollout_id = f"ro-{key}" if key else f"ro-{uuid.uuid4().hex}"
        env = to_job_envelope(body, rollout_id, tenant)
        if body.policy.adapter:
            await self.models.check(body.policy.adapter, tenant, env)
            if env.model != body.policy.model:
                raise ApiError(
                    400,
                    f"adapter {body.policy.adapter!r} is for base model {env.model!r}, not {body.policy.model!r}",
                    "invalid_request",
                    "policy.adapter",
                )
        else:
            await self.models.check(body.policy.model, tenant, None)
        ref = env.adapter_ref
        policy = {
            "model": env.model,
            "adapter": body.policy.adapter,
            "version": f"{ref.name}@{ref.version}" if ref.name else env.model,
        }
        env.policy_version = policy["version"]
        await self._adopt(tenant, rollout_id)  # accepted on another replica: a retry of that job
        if not store.exists(tenant, rollout_id):  # a retry spends no tokens twice
            await self.gate.admission.tokens(tenant, rollout_cost(body))
        claims = self.backend.rollout_claims
        # Alone, the quota check and the accept run with no await between (one event loop); with
        # replicas the quota is counted in Redis, in the script that claims the id.
        if (
            claims is None
            and not store.exists(tenant, rollout_id)
            and store.unfinished(tenant, s.rollout_quota_window_s) >= s.tenant_max_rollouts
        ):
            raise self._over_quota()
        if store.accept(env, policy):
            claim = (
                await claims.claim(env, policy, s.tenant_max_rollouts) if claims is not None else Claim.OURS
            )
            if claim is not Claim.OURS:
                store.forget(tenant, rollout_id)
                if claim is Claim.OVER_QUOTA:
                    raise self._over_quota()
                await self._adopt(tenant, rollout_id)  # another replica took the id meanwhile: its job
                return store.get(tenant, rollout_id, with_samples=False) or {}
            try:
                await self.backend.submit(env, None)
            except Exception:
                store.forget(tenant, rollout_id)
                if claims is not None:
                    await claims.release(tenant, rollout_id)
                raise
            log.info("rollout accepted", rollout_id=rollout_id, groups=len(body.prompts), n=body.n)
        return store.get(tenant, rollout_id, with_samples=False) or {}

    def _over_quota(self) -> ApiError:
        s = self.backend.settings
        return ApiError(
            429,
            f"{s.tenant_max_rollouts} rollouts already unfinished for this tenant in the last "
            f"{s.rollout_quota_window_s:g} s (SY_TENANT_MAX_ROLLOUTS): wait for some to finish",
            "too_many_rollouts",
            None,
            headers={"Retry-After": "5"},
        )

    async def _adopt(self, tenant: str, rollout_id: str) -> None:
        """Copy a rollout another replica accepted into this replica's store (claims.py)."""
        claims = self.backend.rollout_claims
        if claims is None or self.store.exists(tenant, rollout_id):
            return
        found = await claims.find(tenant, rollout_id)
        if found is not None:
            self.store.accept(*found)

    async def get(self, tenant: str, rollout_id: str, samples: bool, wait: float) -> dict[str, Any]:
        """`wait`: long poll; the answer comes when the rollout completed or failed, or after `wait`
        seconds with the status as it is then."""
        store = self.store
        await self._adopt(tenant, rollout_id)
        if wait > 0:
            found = await store.wait_done(tenant, rollout_id, wait)
            if found is not None and samples:
                found = await asyncio.to_thread(store.get, tenant, rollout_id, True)
        else:
            found = await asyncio.to_thread(store.get, tenant, rollout_id, samples)
        if found is None:
            raise ApiError(404, f"no rollout {rollout_id!r}", "not_found", None)
        return found
