"""API fuzzing: schemathesis against the registry's OpenAPI spec (the real app over a LocalStore).

Generated requests for every operation, authenticated and not: no 5xx, and every response a
documented one matches its schema.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance
from switchyard.v1.events_pb2 import AdapterEvent

from services.registry.api import create_app
from services.registry.catalog import Catalog
from shared.config import load_settings
from shared.storage import LocalStore
from tests.helpers.adapters import write_base_model


def _registry_app():  # type: ignore[no-untyped-def]
    root = Path(tempfile.mkdtemp(prefix="sy-fuzz-"))
    write_base_model(root / "models")
    s = load_settings(
        models_dir=root / "models",
        storage_dir=root / "objects",
        api_keys={"sk-a": "acme"},
        adapter_max_bytes=64 * 1024,
        registry_url="http://registry",
        internal_token="tok-internal",
    )

    async def publish(ev: AdapterEvent) -> None:
        return None

    catalog = Catalog(LocalStore(s.object_dir), publish)
    asyncio.run(catalog.load())
    return create_app(s, catalog)


registry = schemathesis.openapi.from_asgi("/openapi.json", _registry_app())


@registry.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_registry_no_5xx_and_responses_match_the_spec(case) -> None:  # type: ignore[no-untyped-def]
    for headers in ({"Authorization": "Bearer sk-a"}, {}):
        response = case.call(headers=headers)
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])


# The gateway as a process against the real broker (and the registry), with no stage behind it: what it can answer
# itself (auth, validation, limits, models, async ids) is checked fully; a well-formed inference
# request reaches its deadline (1 s here) and must end in the documented 504, never another 5xx.
@pytest.fixture(scope="module")
def gateway_schema(broker, tmp_path_factory):  # type: ignore[no-untyped-def]
    import asyncio as aio

    from shared.config import load_settings as settings_from
    from shared.kafka_admin import create_topics
    from tests.helpers.kafka import service_env, services

    var_dir = tmp_path_factory.mktemp("gw-fuzz")
    prefix = "fuzz."
    env = service_env(
        broker.bootstrap,
        prefix,
        var_dir,
        SY_GATEWAY_TIMEOUT_S="1",
        SY_API_KEYS='{"sk-a": "acme"}',
        SY_CACHE_ENABLED="false",
    )
    aio.run(create_topics(settings_from(kafka_bootstrap=broker.bootstrap, topic_prefix=prefix)))
    # The registry runs beside it (an adapter-shaped model name is looked up there; with no
    # registry the documented answer would be 503 registry_unavailable).
    with services(["registry"], env, var_dir) as reg:
        env["SY_REGISTRY_URL"] = f"http://127.0.0.1:{reg['registry'].port}"
        with services(["gateway"], env, var_dir) as procs:
            url = f"http://127.0.0.1:{procs['gateway'].port}"
            schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
            schema.gateway_url = url  # type: ignore[attr-defined]
            yield schema


def test_gateway_no_5xx_but_the_deadline_and_responses_match_the_spec(gateway_schema) -> None:  # type: ignore[no-untyped-def]
    from hypothesis import given

    ops = [r.ok() for r in gateway_schema.get_all_operations()]
    assert len(ops) >= 5, [o.label for o in ops]
    for op in ops:

        @given(op.as_strategy())
        @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case) -> None:  # type: ignore[no-untyped-def]
            for headers in ({"Authorization": "Bearer sk-a"}, {}):
                response = case.call(headers=headers, timeout=30)
                if response.status_code == 504:
                    assert response.json()["error"]["type"], response.text
                    continue
                case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

        check()


def test_gateway_refuses_what_has_no_wire_form_with_400(gateway_schema) -> None:  # type: ignore[no-untyped-def]
    import httpx

    url, auth = gateway_schema.gateway_url + "/v1/chat/completions", {"Authorization": "Bearer sk-a"}
    lone = b'{"model": "sy-tiny", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    r = httpx.post(url, content=lone, headers={**auth, "content-type": "application/json"})
    assert r.status_code == 400 and "cannot be encoded" in r.json()["error"]["message"], r.text
    big = {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 19698216808}
    r = httpx.post(url, json=big, headers=auth)
    assert r.status_code == 400 and "max_tokens" in r.text, r.text
