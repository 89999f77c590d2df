"""vLLM's extra sampling fields (issue 36: standard tools work unchanged), from the REST body to
the engine: each one accepted on /v1/chat/completions, /v1/completions, /v1/requests and batch
lines lands in the envelope; the worker's sampling kwargs build a real `vllm.SamplingParams` with
it (and the vLLM worker's prepare does); fields we cannot honour and hostile values are 400s
naming the field; token ids past the vocabulary are refused by the worker, not crashed on;
Triton refuses what its model lacks; each field that changes the output is in the cache key."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from services.batch.lines import envelope_for
from services.cache.keys import cache_key, sampling_key
from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.requests.sqlite_store import SqliteResultStore
from services.triton_worker.client import unsupported_options
from shared.generation.engine_io import sampling_kwargs
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Rejected, validate
from tests.helpers.answering import Answering
from tests.helpers.envelopes import chat as chat_envelope

AUTH = {"Authorization": "Bearer sk-a"}
CHAT = {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
COMPLETION = {"model": "sy-tiny", "prompt": "hi", "max_tokens": 8}

# field -> (request value, the envelope's value, the kwarg vLLM gets, the SamplingParams attribute)
FIELDS: dict[str, tuple[Any, Any, Any, Any]] = {
    "ignore_eos": (True, True, True, True),
    "min_p": (0.25, 0.25, 0.25, 0.25),
    "top_k": (5, 5, 5, 5),
    "min_tokens": (3, 3, 3, 3),
    "repetition_penalty": (1.25, 1.25, 1.25, 1.25),
    "presence_penalty": (0.5, 0.5, 0.5, 0.5),
    "frequency_penalty": (-0.5, -0.5, -0.5, -0.5),
    "include_stop_str_in_output": (True, True, True, True),
    "skip_special_tokens": (False, False, False, False),
    "spaces_between_special_tokens": (False, False, False, False),
    "stop_token_ids": ([7, 9], [7, 9], [7, 9], [7, 9]),
    "allowed_token_ids": ([3, 4, 5], [3, 4, 5], [3, 4, 5], [3, 4, 5]),
    "bad_words": (["lantern"], ["lantern"], ["lantern"], ["lantern"]),
    "logit_bias": ({"5": 10, "6": -100}, {5: 10.0, 6: -100.0}, {5: 10.0, 6: -100.0}, {5: 10.0, 6: -100.0}),
}


def envelope_value(env: Envelope, name: str) -> Any:
    v = getattr(env.request.sampling, name)
    if name == "logit_bias":
        return dict(v)
    if name in ("stop_token_ids", "allowed_token_ids", "bad_words"):
        return list(v)
    return pytest.approx(v) if isinstance(v, float) else v


def gateway(tmp_path: Path, pipe: Answering) -> httpx.AsyncClient:
    settings = Settings(var_dir=tmp_path, api_keys={"sk-a": "acme"}, gateway_timeout_s=3)
    backend = Backend(
        settings=settings,
        submit=pipe.submit,
        replies=pipe.replies,
        store=SqliteResultStore(tmp_path / "results.sqlite"),
        ready=lambda: True,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(create_app(backend)), base_url="http://gw")


@pytest.mark.parametrize("name", list(FIELDS))
async def test_each_field_reaches_the_envelope_on_every_route(tmp_path: Path, name: str) -> None:
    value, in_envelope, _, _ = FIELDS[name]
    pipe = Answering()
    async with gateway(tmp_path, pipe) as http:
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
            r = await http.post(path, json={**body, name: value}, headers=AUTH)
            assert r.status_code == 200, r.text
        r = await http.post("/v1/requests", json={"body": {**CHAT, name: value}}, headers=AUTH)
        assert r.status_code == 202, r.text
    assert len(pipe.submitted) == 3
    for env in pipe.submitted:
        assert envelope_value(env, name) == in_envelope, (name, env.request.sampling)
    line = {"line": 1, "custom_id": "a", "body": {**CHAT, name: value}}
    batched = envelope_for(line, "/v1/chat/completions", "batch_x", "acme", 0)
    assert envelope_value(batched, name) == in_envelope


async def test_unset_fields_stay_unset_in_the_envelope(tmp_path: Path) -> None:
    pipe = Answering()
    async with gateway(tmp_path, pipe) as http:
        assert (await http.post("/v1/chat/completions", json=CHAT, headers=AUTH)).status_code == 200
    s = pipe.submitted[0].request.sampling
    for name in FIELDS:
        if name in ("stop_token_ids", "allowed_token_ids", "bad_words", "logit_bias"):
            assert not getattr(s, name), name
        else:
            assert not s.HasField(name), name


@pytest.mark.parametrize(
    "field",
    ["use_beam_search", "length_penalty", "prompt_logprobs", "truncate_prompt_tokens", "guided_json"],
)
async def test_a_field_we_cannot_honour_is_a_400_naming_it(tmp_path: Path, field: str) -> None:
    async with gateway(tmp_path, Answering()) as http:
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
            r = await http.post(path, json={**body, field: 1}, headers=AUTH)
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == field and field in err["message"], err


@pytest.mark.parametrize(
    ("extra", "param", "reason"),
    [
        ({"min_p": -0.1}, "min_p", "greater than or equal to 0"),
        ({"min_p": 1.5}, "min_p", "less than or equal to 1"),
        ({"min_p": "0.5"}, "min_p", "valid number"),
        ({"top_k": 2**40}, "top_k", "less than"),
        ({"top_k": -2}, "top_k", "greater than or equal to -1"),
        ({"top_k": "many"}, "top_k", "valid integer"),
        ({"ignore_eos": "true"}, "ignore_eos", "valid boolean"),
        ({"ignore_eos": 1}, "ignore_eos", "valid boolean"),
        ({"skip_special_tokens": "no"}, "skip_special_tokens", "valid boolean"),
        ({"min_tokens": -1}, "min_tokens", "greater than or equal to 0"),
        ({"repetition_penalty": 0}, "repetition_penalty", "greater than 0"),
        ({"presence_penalty": 3}, "presence_penalty", "less than or equal to 2"),
        ({"stop_token_ids": [1, "2"]}, "stop_token_ids.1", "valid integer"),
        ({"stop_token_ids": [-1]}, "stop_token_ids.0", "greater than or equal to 0"),
        ({"stop_token_ids": [2**40]}, "stop_token_ids.0", "less than"),
        ({"allowed_token_ids": []}, "allowed_token_ids", "at least 1 item"),
        ({"logit_bias": {"abc": 1}}, "logit_bias.abc.[key]", "valid integer"),
        ({"logit_bias": {"5": 101}}, "logit_bias.5", "less than or equal to 100"),
        ({"logit_bias": [1, 2]}, "logit_bias", "valid dictionary"),
        ({"bad_words": [""]}, "bad_words.0", "at least 1 character"),
        ({"min_tokens": 9, "max_tokens": 8}, None, "min_tokens (9) must not exceed max_tokens (8)"),
    ],
)
async def test_hostile_values_are_a_400_with_the_reason(
    tmp_path: Path, extra: dict[str, Any], param: str | None, reason: str
) -> None:
    pipe = Answering()
    async with gateway(tmp_path, pipe) as http:
        r = await http.post("/v1/chat/completions", json={**CHAT, **extra}, headers=AUTH)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and reason in err["message"], err
    assert not pipe.submitted


def test_sampling_kwargs_build_a_real_vllm_sampling_params() -> None:
    from vllm import SamplingParams

    env = chat_envelope("r1", "hi", max_tokens=8)
    s = env.request.sampling
    s.temperature = 0.7  # greedy would reset top_k and min_p to vLLM's off values
    for name, (_, in_envelope, _, _) in FIELDS.items():
        if isinstance(in_envelope, dict):
            getattr(s, name).update(in_envelope)
        elif isinstance(in_envelope, list):
            getattr(s, name).extend(in_envelope)
        else:
            setattr(s, name, in_envelope)
    kw = sampling_kwargs(env, prompt_len=4, max_model_len=64, vocab_size=32)
    params = SamplingParams(**kw)
    for name, (_, _, as_kwarg, attribute) in FIELDS.items():
        assert kw[name] == pytest.approx(as_kwarg), name
        assert getattr(params, name) == pytest.approx(attribute), name
    # Unset: vLLM's own defaults, no key at all.
    plain = sampling_kwargs(chat_envelope("r2", "hi"), prompt_len=4, max_model_len=64)
    assert not set(plain) & set(FIELDS)


@pytest.mark.parametrize("field", ["stop_token_ids", "allowed_token_ids", "logit_bias"])
def test_token_ids_past_the_vocabulary_are_refused_naming_the_field(field: str) -> None:
    env = chat_envelope("r1", "hi")
    s = env.request.sampling
    if field == "logit_bias":
        s.logit_bias[40] = 1.0
    else:
        getattr(s, field).extend([3, 40])
    with pytest.raises(Rejected) as exc:
        sampling_kwargs(env, prompt_len=4, max_model_len=64, vocab_size=32)
    assert exc.value.code == "invalid_request" and field in exc.value.reason and "[40]" in exc.value.reason
    assert sampling_kwargs(env, prompt_len=4, max_model_len=64, vocab_size=41)[field]


def test_min_tokens_over_the_room_left_is_refused_not_crashed_on() -> None:
    env = chat_envelope("r1", "hi")
    env.request.sampling.ClearField("max_tokens")
    env.request.sampling.min_tokens = 100
    with pytest.raises(Rejected) as exc:
        sampling_kwargs(env, prompt_len=4, max_model_len=64)  # max_tokens defaults to the room: 60
    assert "min_tokens (100) exceeds max_tokens (60)" in exc.value.reason


async def test_the_vllm_workers_prepare_builds_them_into_its_sampling_params(tmp_path: Path) -> None:
    from services.vllm_worker.generation import VllmGeneration

    gen = VllmGeneration(Settings(var_dir=tmp_path))
    gen.llm = SimpleNamespace(  # type: ignore[assignment]
        tokenizer=SimpleNamespace(
            apply_chat_template=lambda msgs, **kw: "hi", encode=lambda text, **kw: [1, 2, 3]
        ),
        vocab_size=32,
    )
    env = chat_envelope("r1", "hi", max_tokens=8)
    env.request.sampling.temperature = 0.7
    env.request.sampling.ignore_eos = True
    env.request.sampling.min_p = 0.5
    env.request.sampling.stop_token_ids.extend([5])
    params = (await gen.prepare(env)).inputs[1]
    assert (params.ignore_eos, params.min_p, params.stop_token_ids) == (True, 0.5, [5])
    env.request.sampling.stop_token_ids.append(99)
    with pytest.raises(Rejected, match="stop_token_ids"):
        await gen.prepare(env)
    # What only vLLM checks (a Kafka producer's repetition_penalty <= 0) is a refusal, not a crash.
    env = chat_envelope("r2", "hi", max_tokens=8)
    env.request.sampling.repetition_penalty = -1.0
    with pytest.raises(Rejected, match="invalid sampling parameters"):
        await gen.prepare(env)


def test_triton_refuses_what_its_model_lacks_unless_it_is_the_default() -> None:
    base = {"n": 1, "temperature": 0.0, "max_tokens": 4}
    for name, (_, _, as_kwarg, _) in FIELDS.items():
        bad = unsupported_options({**base, name: as_kwarg})
        if name in ("top_k", "min_tokens"):
            assert bad == [], name  # the Triton model implements these
        else:
            assert bad == [name], name
    both = unsupported_options({**base, "presence_penalty": 0.5, "ignore_eos": True, "min_p": 0.1})
    assert both == ["presence_penalty", "min_p", "ignore_eos"]
    neutral = {
        "min_p": 0.0,
        "ignore_eos": False,
        "skip_special_tokens": True,
        "include_stop_str_in_output": False,
    }
    assert unsupported_options({**base, **neutral}) == []


def test_every_field_that_changes_the_output_changes_the_cache_key() -> None:
    base = chat_envelope("r1", "hi")
    before = cache_key(base)
    # The key of a request without the new fields has none of them: stored entries still match.
    assert set(sampling_key(base)) == {"max_tokens", "temperature", "stop", "logprobs"}
    for name, (_, in_envelope, _, _) in FIELDS.items():
        env = chat_envelope("r1", "hi")
        field = getattr(env.request.sampling, name)
        if isinstance(in_envelope, dict):
            field.update(in_envelope)
        elif isinstance(in_envelope, list):
            field.extend(in_envelope)
        else:
            setattr(env.request.sampling, name, in_envelope)
        key = cache_key(env)
        assert key.exact != before.exact and key.params_hash != before.params_hash, name


def test_a_kafka_producers_envelope_is_checked_too() -> None:
    env = chat_envelope("r1", "hi")
    env.request.sampling.min_p = 2.0
    with pytest.raises(Rejected, match="min_p"):
        validate(env)
    env = chat_envelope("r1", "hi")
    env.request.sampling.logit_bias[3] = 500.0
    with pytest.raises(Rejected, match="logit_bias"):
        validate(env)
