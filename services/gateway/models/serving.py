"""Which models a tenant may name: the pools' base models and the registry's adapters."""

from __future__ import annotations

from typing import Any

from shared.adapters.refs import parse_ref, ref_from_manifest
from shared.runtime.envelope import Envelope, ErrorCode
from shared.runtime.telemetry import get_logger

from ..backend import Backend
from ..errors import ApiError

log = get_logger(__name__)


def _base_card(model: str) -> dict[str, Any]:
    return {
        "id": model,
        "object": "model",
        "created": 0,
        "owned_by": "switchyard",
        "root": model,
        "parent": None,
    }


def _adapter_card(a: Any) -> dict[str, Any]:
    """An adapter (shared.adapters.registry_client.Adapter) as vLLM lists a LoRA: `parent` = its base."""
    latest = a.versions[-1] if a.versions else None
    return {
        "id": a.name,
        "object": "model",
        "created": latest.created_unix_ns // 1_000_000_000 if latest else 0,
        "owned_by": a.owner,
        "root": a.name,
        "parent": latest.base_model if latest else None,
    }


def registry_down(exc: Exception) -> ApiError:
    """The 503 for a registry that did not answer (logged): the id may be an adapter, so no 404."""
    log.warning("registry unavailable", error=str(exc))
    return ApiError(503, "the adapter registry is unavailable; retry", "registry_unavailable")


class ModelCatalog:
    """Lists models and pins adapters onto requests (resolved as the tenant sees them)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def list(self, tenant: str) -> dict[str, Any]:
        """Base models, then the adapters this tenant may use (with `parent`, as vLLM lists LoRAs)."""
        data = [_base_card(m) for m in self.backend.models]
        if self.backend.list_adapters is not None:
            try:
                adapters = await self.backend.list_adapters(tenant)
            except Exception as exc:  # noqa: BLE001 - base models are still worth listing
                log.warning("registry unavailable; listing base models only", error=str(exc))
                adapters = []
            data.extend(_adapter_card(a) for a in adapters)
        return {"object": "list", "data": data}

    async def card(self, tenant: str, model_id: str) -> dict[str, Any]:
        """GET /v1/models/{id}: the entry /v1/models lists under that id, else 404 (another
        tenant's private adapter too); 503 when the registry is down (the id may be an adapter)."""
        if model_id in self.backend.models:
            return _base_card(model_id)
        missing = ApiError(404, f"The model '{model_id}' does not exist", "model_not_found", "model")
        if self.backend.list_adapters is None:
            raise missing
        try:
            adapters = await self.backend.list_adapters(tenant)
        except Exception as exc:  # noqa: BLE001 - registry down: say so, don't guess
            raise registry_down(exc) from None
        for a in adapters:
            if a.name == model_id:
                return _adapter_card(a)
        raise missing

    async def base_of(self, tenant: str, model: str) -> str:
        """The base model behind `model`: itself, or the base of an adapter the tenant may use
        (resolved as `check` resolves it); 404 otherwise."""
        if model in self.backend.models:
            return model
        missing = ApiError(404, f"The model '{model}' does not exist", "model_not_found", "model")
        try:
            parse_ref(model)
        except ValueError:
            raise missing from None
        return ref_from_manifest(await self.resolve(tenant, model, missing), model).base_model

    async def resolve(self, tenant: str, ref: str, missing: ApiError) -> Any:
        """The registry's manifest for `ref` as `tenant` sees it; `missing` when unknown or another
        tenant's private adapter (the answer never confirms it exists); 503 when it is down."""
        if self.backend.resolve_adapter is None:
            raise missing
        try:
            manifest = await self.backend.resolve_adapter(tenant, ref)
        except Exception as exc:  # noqa: BLE001 - registry down: say so, don't guess
            raise registry_down(exc) from None
        if manifest is None:
            raise missing
        return manifest

    async def check(self, model: str, tenant: str, env: Envelope | None = None) -> None:
        """A base model, or an adapter the tenant may use; else 404.

        With `env`, the adapter is pinned onto it (`adapter_ref`: name@version, owner, sha256)
        here, before the cache peek, the cache key and the router look at it (DESIGN §6), in both
        forms: `model=<adapter>` and `model=<base>` with `adapter=<adapter>` pin the same ref.
        Another tenant's private adapter is 404 too: the answer never confirms it exists.
        """
        if env is not None:
            env.ClearField("adapter_ref")  # only what is resolved here is trusted
        if model in self.backend.models:
            if env is not None and env.adapter:
                await self.pin_adapter_field(env, tenant)
            return
        missing = ApiError(404, f"The model '{model}' does not exist", "model_not_found", "model")
        try:
            parse_ref(model)
        except ValueError:
            raise missing from None
        if env is not None and env.adapter and env.adapter != model:
            raise ApiError(
                400,
                f"model {model!r} is not a base model: name the adapter in model or in adapter, not both",
                "invalid_request",
                "adapter",
            )
        manifest = await self.resolve(tenant, model, missing)
        if env is not None:
            pinned = ref_from_manifest(manifest, model)
            env.model, env.adapter = pinned.base_model, model
            env.adapter_ref.CopyFrom(pinned)

    async def pin_adapter_field(self, env: Envelope, tenant: str) -> None:
        """`model=<base>, adapter=<name[@version|alias]>`: resolved as the tenant, for that base."""
        ref = env.adapter
        try:
            parse_ref(ref)
        except ValueError as exc:
            raise ApiError(400, str(exc), "invalid_request", "adapter") from None
        missing = ApiError(404, f"adapter {ref!r} does not exist", ErrorCode.ADAPTER_NOT_FOUND, "adapter")
        pinned = ref_from_manifest(await self.resolve(tenant, ref, missing), ref)
        if pinned.base_model != env.model:
            raise ApiError(
                400,
                f"adapter {ref!r} is for base model {pinned.base_model!r}, not {env.model!r}",
                "invalid_request",
                "adapter",
            )
        env.adapter_ref.CopyFrom(pinned)
