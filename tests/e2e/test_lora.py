"""Multi-LoRA end to end: real peft adapters uploaded to the registry, served by the vLLM worker.

One pipeline (registry, preprocess, cache, router, vLLM worker with LoRA, gateway) for the
module; adapters are built in the test from the local base model with different weights.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.conftest import Pipeline
from tests.helpers.peft_adapters import build_adapter, hf_greedy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MSG = [{"role": "user", "content": "reverse: abcdef"}]
A = {"Authorization": "Bearer sk-a"}
B = {"Authorization": "Bearer sk-b"}


@pytest.fixture(scope="module")
def adapters(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        name: build_adapter(model_dir, root / name, seed) for name, seed in (("a1", 1), ("a2", 2), ("b1", 3))
    }


@pytest.fixture(scope="module")
def lora_pipeline(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    p = Pipeline(tmp_path_factory.mktemp("lora-pipeline"))
    try:
        p.wait_up()
        httpx.post(
            p.base_url + "/chat/completions",
            timeout=120,
            headers=A,
            json={"model": "sy-tiny", "messages": MSG, "max_tokens": 2},
        )
        yield p
    finally:
        p.stop()


def registry(p: Pipeline) -> str:
    return p.endpoints["services"]["registry"]["url"]


def upload(p: Pipeline, name: str, adapter_dir: Path, headers: dict, **form: str) -> httpx.Response:
    files = {
        "adapter_model": (
            "adapter_model.safetensors",
            (adapter_dir / "adapter_model.safetensors").read_bytes(),
        ),
        "adapter_config": ("adapter_config.json", (adapter_dir / "adapter_config.json").read_bytes()),
    }
    return httpx.post(
        registry(p) + "/v1/adapters", data={"name": name, **form}, files=files, headers=headers, timeout=60
    )


def chat(client: openai.OpenAI, model: str, messages=MSG, max_tokens: int = 12):
    return client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0
    )


@pytest.fixture(scope="module")
def client_a(lora_pipeline) -> openai.OpenAI:
    return openai.OpenAI(base_url=lora_pipeline.base_url, api_key="sk-a", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def client_b(lora_pipeline) -> openai.OpenAI:
    return openai.OpenAI(base_url=lora_pipeline.base_url, api_key="sk-b", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def published(lora_pipeline, adapters) -> None:
    for name, key in (("alpha", "a1"), ("beta", "a2")):
        r = upload(lora_pipeline, name, adapters[key], A)
        assert r.status_code == 201, r.text
        assert r.json()["version"] == 1 and r.json()["rank"] == 8 and r.json()["base_model"] == "sy-tiny"


def prompt_ids(model_dir: Path, messages) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tok.encode(text, add_special_tokens=False)


def test_adapter_output_differs_from_base_matches_peft_and_is_stable(
    published, client_a, model_dir, adapters
) -> None:
    base = chat(client_a, "sy-tiny").choices[0].message.content
    first = chat(client_a, "alpha")
    text = first.choices[0].message.content
    assert text != base
    assert chat(client_a, "alpha").choices[0].message.content == text  # greedy: stable
    # The first use of an adapter shows its load in the breakdown (downloaded from the registry).
    loads = [r for r in first.model_extra["switchyard"]["breakdown"] if r["stage"] == "adapter_load"]
    assert loads and loads[0]["adapter"] == "alpha@1" and loads[0]["downloaded"] == "True"
    # Same tokens as transformers + peft with the same adapter (fp32, greedy).
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = hf_greedy(model_dir, adapters["a1"], prompt_ids(model_dir, MSG), first.usage.completion_tokens)
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_two_adapters_and_base_in_one_batch_each_get_their_own_output(published, client_a) -> None:
    solo = {m: chat(client_a, m).choices[0].message.content for m in ("sy-tiny", "alpha", "beta")}
    assert len(set(solo.values())) == 3
    models = ["sy-tiny", "alpha", "beta"] * 4
    with ThreadPoolExecutor(len(models)) as pool:
        outs = list(pool.map(lambda m: chat(client_a, m).choices[0].message.content, models))
    assert outs == [solo[m] for m in models]


def test_alias_move_switches_version_without_restart(published, lora_pipeline, client_a, adapters) -> None:
    r = upload(lora_pipeline, "alpha", adapters["a2"], A)  # alpha v2 = other weights
    assert r.status_code == 201 and r.json()["version"] == 2, r.text
    v1 = chat(client_a, "alpha@1").choices[0].message.content
    v2 = chat(client_a, "alpha@2").choices[0].message.content
    assert v1 != v2
    assert chat(client_a, "alpha").choices[0].message.content == v2  # `latest` moved on upload
    for version, expected in ((1, v1), (2, v2), (1, v1)):
        r = httpx.put(
            registry(lora_pipeline) + "/v1/adapters/alpha/aliases/prod", json={"version": version}, headers=A
        )
        assert r.status_code == 200, r.text
        assert chat(client_a, "alpha@prod").choices[0].message.content == expected
    # A new version of an adapter the worker serves is prefetched to its disk before anyone asks.
    r = upload(lora_pipeline, "alpha", adapters["b1"], A)
    assert r.status_code == 201 and r.json()["version"] == 3, r.text
    prefetched = lora_pipeline.var_dir / "adapter-cache" / "alpha" / "v3"
    deadline = time.monotonic() + 20
    while not prefetched.is_dir() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert prefetched.is_dir(), "the worker did not prefetch alpha@3"


def test_deleting_a_version_evicts_it(published, lora_pipeline, client_a, adapters) -> None:
    r = upload(lora_pipeline, "gamma", adapters["a1"], A)
    assert r.status_code == 201, r.text
    assert chat(client_a, "gamma@1").choices[0].message.content
    cached = lora_pipeline.var_dir / "adapter-cache" / "gamma" / "v1"
    assert cached.is_dir()
    r = httpx.delete(registry(lora_pipeline) + "/v1/adapters/gamma/versions/1", headers=A)
    assert r.status_code == 204, r.text
    deadline = time.monotonic() + 60  # a loaded CI machine
    while cached.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not cached.exists(), "worker did not evict the deleted version"
    with pytest.raises(openai.NotFoundError):
        chat(client_a, "gamma@1")


def test_tenant_isolation_for_list_get_use_delete(
    published, lora_pipeline, client_a, client_b, adapters
) -> None:
    ids_a = {m.id: m for m in client_a.models.list()}
    assert "alpha" in ids_a and ids_a["alpha"].model_extra["parent"] == "sy-tiny"
    assert "alpha" not in {m.id for m in client_b.models.list()}
    with pytest.raises(openai.NotFoundError) as err:
        chat(client_b, "alpha")
    assert "does not exist" in str(err.value)
    reg = registry(lora_pipeline)
    assert httpx.get(reg + "/v1/adapters/alpha", headers=B).status_code == 404
    assert httpx.delete(reg + "/v1/adapters/alpha", headers=B).status_code == 404
    assert httpx.get(reg + "/v1/adapters/alpha", headers=A).status_code == 200
    # A public adapter is usable by others, who still cannot change it.
    r = upload(lora_pipeline, "shared-one", adapters["a2"], A, visibility="public")
    assert r.status_code == 201, r.text
    assert chat(client_b, "shared-one").choices[0].message.content
    assert httpx.delete(reg + "/v1/adapters/shared-one", headers=B).status_code == 403


def test_heartbeats_list_resident_adapters_and_partitions(published, lora_pipeline, client_a) -> None:
    import asyncio

    from switchyard.v1.events_pb2 import Heartbeat

    from tests.helpers.kafka import collect

    assert chat(client_a, "beta").choices[0].message.content is not None
    start = time.time_ns()

    def fresh_with_beta(recs) -> bool:
        hbs = [Heartbeat.FromString(r.value) for r in recs]
        return any(h.sent_unix_ns > start and "beta@1" in h.adapters for h in hbs)

    recs = asyncio.run(
        collect(lora_pipeline.endpoints["kafka"], "sy.heartbeats", 0, 20, until=fresh_with_beta)
    )
    hb = [Heartbeat.FromString(r.value) for r in recs][-1]
    assert "beta@1" in hb.adapters and "sy-base-zero" not in " ".join(hb.adapters)
    assert sorted(hb.partitions) == [0, 1, 2, 3] and hb.max_lora_rank == 8
