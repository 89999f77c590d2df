"""An adapter request is never answered from the base model's cache entry (issue 33, DESIGN §6).

The whole stack with the cache on and the registry: a greedy base answer is cached (a repeat is an
exact hit), then the same prompt goes through a private adapter in both forms (`model=<adapter>`
and `model=<base>, adapter=<adapter>`). The gateway pins the adapter (name@version, owner checked)
before its cache peek, so neither form reaches the base entry; both say which adapter version
answered (`switchyard.adapter`, `X-Switchyard-Adapter`). Another tenant gets 404 in both forms.
The key/scope logic has its unit test (tests/unit/test_gateway_adapter_pin.py).

The adapter views (issue 38) on the same stack, through the openai client: `models.list()` shows an
adapter's parent, versions and aliases, `models.retrieve()` answers a base model, an adapter and
`name@version` / `name@alias` (404 for an unknown version, alias or another tenant), and sync,
streamed and async replies name the `adapter@version` that answered (`system_fingerprint`).
Their unit tests: tests/unit/test_gateway_models.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from shared.devstack.models.adapters import build_adapter
from tests.e2e.conftest import Pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MSG = [{"role": "user", "content": "reverse: abcdef"}]
A = {"Authorization": "Bearer sk-a"}
B = {"Authorization": "Bearer sk-b"}
BASE = {"model": "sy-tiny", "messages": MSG, "max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def stack(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path_factory.mktemp("adapter-cache"), SY_CACHE_ENABLED="true")
    try:
        p.wait_up(timeout_s=300)
        yield p
    finally:
        p.stop()


def chat(p: Pipeline, headers: dict, **body: object) -> httpx.Response:
    return httpx.post(p.base_url + "/chat/completions", json={**BASE, **body}, headers=headers, timeout=180)


def stored(p: Pipeline) -> int:
    url = p.endpoints["services"]["cache"]["url"] + "/v1/cache/stats"
    return int(httpx.get(url, timeout=10).json().get("stored", 0))


def wait_stored(p: Pipeline, n: int, timeout_s: float = 60, must: bool = True) -> bool:
    deadline = time.monotonic() + timeout_s  # the write-back from sy.responses is asynchronous
    while stored(p) < n:
        if time.monotonic() > deadline:
            assert not must, f"cache holds {stored(p)} entries, waited for {n}"
            return False
        time.sleep(0.2)
    return True


def upload(p: Pipeline, name: str, adapter_dir: Path, headers: dict) -> httpx.Response:
    files = {
        "adapter_model": (
            "adapter_model.safetensors",
            (adapter_dir / "adapter_model.safetensors").read_bytes(),
        ),
        "adapter_config": ("adapter_config.json", (adapter_dir / "adapter_config.json").read_bytes()),
    }
    registry = p.endpoints["services"]["registry"]["url"]
    return httpx.post(
        registry + "/v1/adapters", data={"name": name}, files=files, headers=headers, timeout=60
    )


def test_adapter_requests_are_not_answered_from_the_base_entry(
    stack: Pipeline, model_dir: Path, tmp_path: Path
) -> None:
    r = upload(stack, "secret-lora", build_adapter(model_dir, tmp_path / "lora", 1), A)
    assert r.status_code == 201, r.text
    version = r.json()["version"]
    label = f"secret-lora@{version}"

    # A greedy base answer, cached: the repeat is the base's exact entry.
    first = chat(stack, A)
    assert first.status_code == 200, first.text
    base_text = first.json()["choices"][0]["message"]["content"]
    assert first.json()["switchyard"]["adapter"] is None
    wait_stored(stack, 1)
    again = chat(stack, A).json()
    base_hit = again["switchyard"]["cache"]
    assert base_hit["hit"] and base_hit["tier"] == "exact", again["switchyard"]
    assert again["choices"][0]["message"]["content"] == base_text

    # The same prompt through the adapter, named in model: pinned before the peek, so a miss
    # (the adapter's own scope holds nothing yet), served by the adapter.
    by_model = chat(stack, A, model="secret-lora")
    assert by_model.status_code == 200, by_model.text
    out = by_model.json()
    assert "cache" not in out["switchyard"], out["switchyard"]
    assert out["switchyard"]["adapter"] == label and by_model.headers["x-switchyard-adapter"] == label
    assert out["model"] == "secret-lora"
    adapter_text = out["choices"][0]["message"]["content"]
    assert adapter_text != base_text  # the adapter was applied (its weights differ from the base)

    # The adapter field: the same pinned ref, hence the same key. Never the base entry; once the
    # adapter's own answer is written back it may answer from that (same adapter@version).
    adapter_stored = wait_stored(stack, 2, timeout_s=30, must=False)
    by_field = chat(stack, A, adapter="secret-lora")
    assert by_field.status_code == 200, by_field.text
    out = by_field.json()
    info = out["switchyard"]
    assert info["adapter"] == label and by_field.headers["x-switchyard-adapter"] == label
    assert out["choices"][0]["message"]["content"] == adapter_text != base_text
    if "cache" in info:  # from the adapter's own entry (model= form), never the base's
        assert info["cache"]["entry_id"] != base_hit["entry_id"], info
    print(f"adapter entry stored: {adapter_stored}; field form answered by: {info.get('cache')}")
    # Both forms with the version pinned by the client reach the same answer.
    pinned = chat(stack, A, adapter=label).json()
    assert pinned["switchyard"]["adapter"] == label
    assert pinned["choices"][0]["message"]["content"] == adapter_text

    # Another tenant: 404 in both forms (the adapter is private), and no cached answer leaks.
    for body, code in (
        ({"model": "secret-lora"}, "model_not_found"),
        ({"adapter": "secret-lora"}, "adapter_not_found"),
    ):
        r = chat(stack, B, **body)
        assert r.status_code == 404, (body, r.text)
        assert r.json()["error"]["code"] == code, r.text


def test_adapters_are_visible_to_the_openai_client(stack: Pipeline, model_dir: Path, tmp_path: Path) -> None:
    for seed in (4, 5):
        r = upload(stack, "view-lora", build_adapter(model_dir, tmp_path / f"v{seed}", seed), A)
        assert r.status_code == 201, r.text
    registry = stack.endpoints["services"]["registry"]["url"]
    r = httpx.put(
        registry + "/v1/adapters/view-lora/aliases/prod", json={"version": 1}, headers=A, timeout=30
    )
    assert r.status_code == 200, r.text
    client = openai.OpenAI(base_url=stack.base_url, api_key="sk-a", max_retries=0, timeout=180)
    other = openai.OpenAI(base_url=stack.base_url, api_key="sk-b", max_retries=0, timeout=180)

    # The list: each adapter with its parent, versions and aliases.
    listed = {m.id: m for m in client.models.list()}
    card = listed["view-lora"].model_extra or {}
    assert card["parent"] == "sy-tiny" and card["root"] == "view-lora@2" and card["version"] == 2
    assert [v["id"] for v in card["versions"]] == ["view-lora@1", "view-lora@2"]
    assert card["aliases"] == {"latest": 2, "prod": 1}
    assert "view-lora" not in {m.id for m in other.models.list()}

    # One card: a base model, the adapter, a version, an alias; 404 for what does not exist.
    assert client.models.retrieve("sy-tiny").id == "sy-tiny"
    for model_id, root in (
        ("view-lora", "view-lora@2"),
        ("view-lora@1", "view-lora@1"),
        ("view-lora@prod", "view-lora@1"),
    ):
        got = client.models.retrieve(model_id)
        assert got.id == model_id and (got.model_extra or {})["root"] == root, got
    for model_id, c in (("view-lora@7", client), ("view-lora@staging", client), ("view-lora", other)):
        with pytest.raises(openai.NotFoundError):
            c.models.retrieve(model_id)

    # Replies name the version that answered: sync (body, header, breakdown), streamed, async.
    msg = [{"role": "user", "content": "reverse: visible"}]
    raw = client.chat.completions.with_raw_response.create(
        model="view-lora@prod",
        messages=msg,
        max_tokens=8,
        temperature=0,  # type: ignore[arg-type]
    )
    reply = raw.parse()
    assert reply.model == "view-lora@prod" and reply.system_fingerprint == "view-lora@1"
    assert raw.headers["x-switchyard-adapter"] == "view-lora@1"
    info = (reply.model_extra or {})["switchyard"]
    assert info["adapter"] == "view-lora@1"
    assert any(
        row["stage"] == "adapter_resolve" and row["adapter"] == "view-lora@1" for row in info["breakdown"]
    )
    chunks = list(
        client.chat.completions.create(
            model="view-lora",
            messages=msg,
            max_tokens=8,
            temperature=0,
            stream=True,  # type: ignore[arg-type]
        )
    )
    assert chunks and {c.system_fingerprint for c in chunks} == {"view-lora@2"}
    r = httpx.post(
        stack.base_url + "/requests",
        json={"body": {"model": "view-lora@prod", "messages": msg, "max_tokens": 8, "temperature": 0}},
        headers=A,
        timeout=60,
    )
    assert r.status_code in (200, 202), r.text
    deadline = time.monotonic() + 120
    while (status := httpx.get(f"{stack.base_url}/requests/{r.json()['id']}", headers=A, timeout=30).json())[
        "status"
    ] == "queued" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status["status"] == "completed", status
    assert status["result"]["system_fingerprint"] == "view-lora@1", status
    assert status["result"]["switchyard"]["adapter"] == "view-lora@1"
