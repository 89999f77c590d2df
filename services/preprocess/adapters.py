"""Pin a request's adapter to one version before anything else looks at it.

`model` may name an adapter (as with vLLM's OpenAI server), or `adapter` may carry
`name`, `name@3` or `name@alias`. The registry resolves it once, here; the envelope then
carries the exact version, so the cache scope, the router's affinity and the worker agree,
and an alias moved while the request is in flight does not change what serves it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from switchyard.v1.envelope_pb2 import AdapterRef

from shared.adapters.refs import parse_ref, ref_from_manifest
from shared.runtime.envelope import Envelope, ErrorCode, Rejected
from shared.runtime.telemetry import add_timing

# resolve(tenant, ref) -> the registry's manifest (dict or model) or None when unknown/invisible.
Resolve = Callable[[str, str], Awaitable[Any | None]]


def _other_base(ref: str, pinned: AdapterRef, model: str) -> Rejected:
    """The refusal of an adapter named with a base model it was not trained on."""
    return Rejected(
        ErrorCode.INVALID_REQUEST,
        f"adapter {ref!r} is for base model {pinned.base_model!r}, not {model!r}",
        400,
    )


def _set_pin(env: Envelope, pinned: AdapterRef, start: int) -> None:
    """The pinned version onto the envelope, and the registry's time as adapter_resolve."""
    env.adapter_ref.CopyFrom(pinned)
    add_timing(
        env,
        "adapter_resolve",
        start,
        time.time_ns(),
        parent="preprocess",
        adapter=f"{pinned.name}@{pinned.version}",
    )


class AdapterPinner:
    def __init__(self, base_models: set[str], resolve: Resolve) -> None:
        self.base_models = base_models
        self._resolve = resolve

    async def pin(self, env: Envelope) -> None:
        """Fill `env.adapter_ref` (and `env.model` when it named the adapter); Rejected if not servable."""
        if env.adapter_ref.name:
            await self._repin(env)
            return
        if not env.adapter and (not env.model or env.model in self.base_models):
            return  # a base model, or no model at all (validation says so)
        named_by_model = not env.adapter
        ref = env.adapter or env.model
        try:
            parse_ref(ref)
        except ValueError as exc:
            if named_by_model:
                raise Rejected(
                    ErrorCode.MODEL_NOT_FOUND, f"The model '{env.model}' does not exist", 404
                ) from exc
            raise Rejected(ErrorCode.INVALID_REQUEST, str(exc), 400) from exc
        start = time.time_ns()
        manifest = await self._resolve(env.tenant, ref)
        if manifest is None:
            if named_by_model:
                raise Rejected(ErrorCode.MODEL_NOT_FOUND, f"The model '{env.model}' does not exist", 404)
            raise Rejected(ErrorCode.ADAPTER_NOT_FOUND, f"adapter {ref!r} does not exist", 404)
        pinned = ref_from_manifest(manifest, ref)
        if named_by_model:
            env.model = pinned.base_model
            env.adapter = ref
        elif env.model != pinned.base_model:
            raise _other_base(ref, pinned, env.model)
        _set_pin(env, pinned, start)

    async def _repin(self, env: Envelope) -> None:
        """A ref pinned before the record got here is trusted by nobody: any producer can write
        one, naming another tenant's private adapter (issue 33). It is resolved again as the
        record's own tenant, and the registry's answer replaces whatever the record claimed."""
        given = env.adapter_ref
        ref = f"{given.name}@{given.version}" if given.version else given.name
        try:
            parse_ref(ref)
        except ValueError as exc:
            raise Rejected(ErrorCode.INVALID_REQUEST, f"adapter_ref: {exc}", 400) from exc
        start = time.time_ns()
        manifest = await self._resolve(env.tenant, ref)
        if manifest is None:
            raise Rejected(ErrorCode.ADAPTER_NOT_FOUND, f"adapter {ref!r} does not exist", 404)
        pinned = ref_from_manifest(manifest, given.requested or env.adapter or ref)
        if env.model and env.model != pinned.base_model and env.model != (env.adapter or given.name):
            raise _other_base(ref, pinned, env.model)
        env.model = pinned.base_model
        env.adapter = env.adapter or pinned.requested
        _set_pin(env, pinned, start)
