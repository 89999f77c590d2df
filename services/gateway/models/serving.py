"""Which models a tenant may name: the pools' base models and the registry's adapters."""

from __future__ import annotations

import time
from typing import Any

from switchyard.v1.envelope_pb2 import AdapterRef

from shared.adapters.refs import parse_ref, ref_from_manifest
from shared.adapters.registry_client import Adapter, Manifest
from shared.runtime.envelope import Envelope, ErrorCode
from shared.runtime.telemetry import add_timing, get_logger

from ..backend import Backend
from ..errors import ApiError
from .protocol import AdapterVersionCard, ModelCard, ModelList

log = get_logger(__name__)

MAX_ECHO = 256  # characters of an unknown model id quoted back in the 404


def _base_card(model: str) -> ModelCard:
    return ModelCard(id=model, object="model", created=0, owned_by="switchyard", root=model, parent=None)


def _version_card(a: Adapter, m: Manifest) -> AdapterVersionCard:
    return AdapterVersionCard(
        id=f"{a.name}@{m.version}",
        version=m.version,
        created=m.created_unix_ns // 1_000_000_000,
        base_model=m.base_model,
        rank=m.rank,
        aliases=sorted(alias for alias, v in a.aliases.items() if v == m.version),
    )


def pinned_version(a: Adapter, version: int | None, alias: str | None) -> Manifest | None:
    """The live version `name`, `name@N` or `name@alias` names now (parse_ref's parts); None if none."""
    if alias is not None:
        if alias not in a.aliases:
            # A bare name is `latest`: the newest live version even if the alias is missing.
            return a.versions[-1] if alias == "latest" and a.versions else None
        version = a.aliases[alias]
    return next((m for m in a.versions if m.version == version), None)


def _adapter_card(a: Adapter, model_id: str, pinned: Manifest) -> ModelCard:
    """An adapter as vLLM lists a LoRA (`parent` = its base), with its versions and aliases;
    `root` and `version` say which version `model_id` pins now."""
    return ModelCard(
        id=model_id,
        object="model",
        created=pinned.created_unix_ns // 1_000_000_000,
        owned_by=a.owner,
        root=f"{a.name}@{pinned.version}",
        parent=pinned.base_model,
        version=pinned.version,
        versions=[_version_card(a, m) for m in a.versions],
        aliases=dict(sorted(a.aliases.items())),
    )


def card_body(card: ModelCard | ModelList) -> dict[str, Any]:
    """A card as JSON: a base model's has no adapter fields (unset), but `parent: null`."""
    return card.model_dump(mode="json", exclude_unset=True)


def model_not_found(model: str) -> ApiError:
    """OpenAI's 404 for a model id; a hostile id is echoed cut short, never whole."""
    shown = model if len(model) <= MAX_ECHO else model[:MAX_ECHO] + "..."
    return ApiError(404, f"The model '{shown}' does not exist", "model_not_found", "model")


def pin(env: Envelope, pinned: AdapterRef, start_ns: int) -> None:
    """The pinned version onto the envelope, and into its breakdown as `adapter_resolve`
    (a refinement of gateway_accept, named `name@version`, as preprocess records its own pin)."""
    env.adapter_ref.CopyFrom(pinned)
    add_timing(
        env,
        "adapter_resolve",
        start_ns,
        time.time_ns(),
        parent="gateway_accept",
        adapter=f"{pinned.name}@{pinned.version}",
    )


def registry_down(exc: Exception) -> ApiError:
    """The 503 for a registry that did not answer (logged): the id may be an adapter, so no 404."""
    log.warning("registry unavailable", error=str(exc))
    return ApiError(503, "the adapter registry is unavailable; retry", "registry_unavailable")


class ModelCatalog:
    """Lists models and pins adapters onto requests (resolved as the tenant sees them)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def list(self, tenant: str) -> ModelList:
        """Base models, then the adapters this tenant may use (with `parent`, as vLLM lists LoRAs),
        each with its versions and aliases; without the registry, base models only (logged)."""
        data = [_base_card(m) for m in self.backend.models]
        if self.backend.list_adapters is not None:
            try:
                adapters = await self.list_adapters(tenant)
            except Exception as exc:  # noqa: BLE001 - base models are still worth listing
                log.warning("registry unavailable; listing base models only", error=str(exc))
                adapters = []
            for a in adapters:
                latest = pinned_version(a, None, "latest")
                if latest is not None:
                    data.append(_adapter_card(a, a.name, latest))
        return ModelList(object="list", data=data)

    async def card(self, tenant: str, model_id: str) -> ModelCard:
        """GET /v1/models/{id}: a base model, or an adapter this tenant may use named as `name`,
        `name@3` or `name@prod` (the card says which version that pins now); 404 otherwise (an
        unknown version or alias, another tenant's private adapter, an id no adapter can have);
        503 when the registry is down (the id may be an adapter)."""
        if model_id in self.backend.models:
            return _base_card(model_id)
        missing = model_not_found(model_id)
        try:
            name, version, alias = parse_ref(model_id)
        except ValueError:
            raise missing from None  # never an adapter: no need to ask the registry
        if self.backend.list_adapters is None:
            raise missing
        try:
            adapters = await self.list_adapters(tenant)
        except Exception as exc:  # noqa: BLE001 - registry down: say so, don't guess
            raise registry_down(exc) from None
        for a in adapters:
            if a.name == name:
                pinned = pinned_version(a, version, alias)
                if pinned is None:
                    break
                return _adapter_card(a, model_id, pinned)
        raise missing

    async def list_adapters(self, tenant: str) -> list[Adapter]:
        """The registry's adapters for `tenant` (its own and public ones), validated here."""
        assert self.backend.list_adapters is not None
        return [
            a if isinstance(a, Adapter) else Adapter.model_validate(a)
            for a in await self.backend.list_adapters(tenant)
        ]

    async def base_of(self, tenant: str, model: str) -> str:
        """The base model behind `model`: itself, or the base of an adapter the tenant may use
        (resolved as `check` resolves it); 404 otherwise."""
        if model in self.backend.models:
            return model
        missing = model_not_found(model)
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
        missing = model_not_found(model)
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
        start = time.time_ns()
        manifest = await self.resolve(tenant, model, missing)
        if env is not None:
            pinned = ref_from_manifest(manifest, model)
            env.model, env.adapter = pinned.base_model, model
            pin(env, pinned, start)

    async def pin_adapter_field(self, env: Envelope, tenant: str) -> None:
        """`model=<base>, adapter=<name[@version|alias]>`: resolved as the tenant, for that base."""
        ref = env.adapter
        try:
            parse_ref(ref)
        except ValueError as exc:
            raise ApiError(400, str(exc), "invalid_request", "adapter") from None
        missing = ApiError(404, f"adapter {ref!r} does not exist", ErrorCode.ADAPTER_NOT_FOUND, "adapter")
        start = time.time_ns()
        pinned = ref_from_manifest(await self.resolve(tenant, ref, missing), ref)
        if pinned.base_model != env.model:
            raise ApiError(
                400,
                f"adapter {ref!r} is for base model {pinned.base_model!r}, not {env.model!r}",
                "invalid_request",
                "adapter",
            )
        pin(env, pinned, start)
