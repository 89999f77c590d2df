"""Admission limits of the gateway process on the real broker (no stage behind it: requests wait
until their 2 s deadline, which is what holds slots): per-tenant rate with Retry-After, this
replica's bound on waiting requests, concurrent streams per tenant; API keys never in the logs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from shared.runtime.config import load_settings
from shared.runtime.kafka_admin import create_topics
from tests.helpers.kafka import service_env, services
from tests.helpers.reliability import record

BODY = {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def gateway_env(broker, tmp_path: Path, prefix: str, **settings: str) -> tuple[dict[str, str], Path]:  # type: ignore[no-untyped-def]
    """Topics under `prefix` and a gateway's environment (2 s deadline: nothing stands behind it)."""
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    await create_topics(load_settings(kafka_bootstrap=broker.bootstrap, topic_prefix=prefix))
    return service_env(broker.bootstrap, prefix, var_dir, SY_GATEWAY_TIMEOUT_S="2", **settings), var_dir


async def test_rate_overload_and_stream_limits(broker, tmp_path: Path) -> None:
    env, var_dir = await gateway_env(
        broker,
        tmp_path,
        "limits.",
        SY_API_KEYS=json.dumps({"sk-rate": "slow", "sk-free": "free", "sk-s": "streamer"}),
        SY_GATEWAY_RATE_LIMITS=json.dumps({"slow": 0.5}),
        SY_GATEWAY_RATE_BURST_S="2",
        SY_GATEWAY_MAX_IN_FLIGHT="3",
        SY_GATEWAY_MAX_STREAMS_PER_TENANT="1",
    )
    with services(["gateway"], env, var_dir) as procs:
        url = f"http://127.0.0.1:{procs['gateway'].port}/v1/chat/completions"

        def key(k: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {k}"}

        async with httpx.AsyncClient(timeout=30) as http:
            # Rate: 0.5 rps with a 2 s burst = 1 request, then 429 with Retry-After.
            first = asyncio.create_task(http.post(url, json=BODY, headers=key("sk-rate")))
            await asyncio.sleep(0.2)
            limited = await http.post(url, json=BODY, headers=key("sk-rate"))
            assert limited.status_code == 429, limited.text
            assert limited.json()["error"]["type"] == "rate_limit_error"
            assert 1 <= int(limited.headers["retry-after"]) <= 2
            assert (await first).status_code == 504  # nothing behind the gateway: the deadline
            # Streams: one open stream per tenant; a second one is refused while the first is open.
            stream = asyncio.create_task(http.post(url, json={**BODY, "stream": True}, headers=key("sk-s")))
            await asyncio.sleep(0.3)
            second = await http.post(url, json={**BODY, "stream": True}, headers=key("sk-s"))
            assert second.status_code == 429 and second.json()["error"]["code"] == "too_many_streams"
            await stream
            # Overload: 3 waiting requests fill this replica; the 4th gets 503 at once, not a queue.
            waiting = [
                asyncio.create_task(http.post(url, json=BODY, headers=key("sk-free"))) for _ in range(3)
            ]
            await asyncio.sleep(0.3)
            over = await http.post(url, json=BODY, headers=key("sk-free"))
            assert over.status_code == 503 and over.json()["error"]["code"] == "overloaded"
            assert over.headers["retry-after"] == "1"
            assert [r.status_code for r in await asyncio.gather(*waiting)] == [504, 504, 504]
            # Slots come back: the next request is admitted again.
            again = await http.post(url, json=BODY, headers=key("sk-free"))
            assert again.status_code == 504
        log = procs["gateway"].log_path.read_text()
    for secret in ("sk-rate", "sk-free", "sk-s"):
        assert secret not in log
    record(
        "limits",
        "rate 0.5 rps: 2nd request 429 Retry-After; 2nd stream of a tenant 429 too_many_streams; "
        "4th waiting request on a 3-slot replica 503 overloaded at once; slots given back; no key logged",
    )


INTERNAL = "tok-admission-test-" + "x" * 24


def _route_calls(spec: dict) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    """Every operation of the gateway's OpenAPI document, path parameters filled in."""
    calls = []
    for path, ops in spec["paths"].items():
        for method in ops:
            filled = path
            for name in ("request_id", "rollout_id", "batch_id", "file_id"):
                filled = filled.replace("{" + name + "}", "x-1")
            calls.append((method.upper(), filled))
    return calls


async def test_every_route_429s_with_retry_after_and_budgets_and_quotas_hold(broker, tmp_path: Path) -> None:
    """Issue 33: a tenant past its rate gets 429 + Retry-After on every route it can call (the
    OpenAPI document lists them, so a new route is covered); the token budget counts prompt +
    max_tokens x n; queued async requests, unfinished rollouts, kept files and open batches
    have quotas, each a 429 with Retry-After; retries of what was accepted are not refused."""
    env, var_dir = await gateway_env(
        broker,
        tmp_path,
        "admit.",
        SY_CACHE_ENABLED="false",
        SY_API_KEYS=json.dumps({"sk-r": "rated", "sk-t": "tokens", "sk-q": "quota"}),
        SY_GATEWAY_RATE_LIMITS=json.dumps({"rated": 0.01}),  # one request per 100 s window
        SY_GATEWAY_RATE_BURST_S="100",
        SY_GATEWAY_TOKEN_BUDGETS=json.dumps({"tokens": 100}),
        SY_TENANT_MAX_QUEUED="1",
        SY_TENANT_MAX_ROLLOUTS="1",
        SY_TENANT_MAX_FILES="1",
        SY_TENANT_MAX_BATCHES="1",
        SY_ADMIN_AUTH="required",
        SY_INTERNAL_TOKEN=INTERNAL,
    )
    chat = {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60}
    rollout = {
        "policy": {"model": "sy-tiny"},
        "prompts": [{"prompt": "hi"}],
        "n": 1,
        "sampling": {"max_tokens": 8},
        "reward": {"functions": [{"name": "length_penalty"}]},
    }
    with services(["gateway"], env, var_dir) as procs:
        base = f"http://127.0.0.1:{procs['gateway'].port}"

        def key(k: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {k}"}

        def is_429(r: httpx.Response, code: str) -> None:
            assert r.status_code == 429, (code, r.status_code, r.text)
            assert r.json()["error"]["code"] == code, r.text
            assert int(r.headers["retry-after"]) >= 1, r.headers

        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            # Admin paths of the process (shared/runtime/service.py wraps every service): the internal token.
            admin = {"Authorization": f"Bearer {INTERNAL}"}
            for path in ("/metrics", "/openapi.json", "/docs"):
                assert (await http.get(path)).status_code == 401, path
                assert (await http.get(path, headers=key("sk-q"))).status_code == 401, path
                assert (await http.get(path, headers=admin)).status_code == 200, path
            assert (await http.get("/readyz")).status_code == 200
            # Rate: every route the tenant can call.
            calls = _route_calls((await http.get("/openapi.json", headers=admin)).json())
            assert {
                ("POST", "/v1/chat/completions"),
                ("POST", "/v1/rollouts"),
                ("POST", "/v1/files"),
                ("POST", "/v1/batches"),
                ("GET", "/v1/requests/x-1"),
            } <= set(calls), calls
            assert (await http.get("/v1/models", headers=key("sk-r"))).status_code == 200
            for method, path in calls:
                r = await http.request(method, path, headers=key("sk-r"), json={})
                is_429(r, "rate_limit_exceeded")
            assert (await http.get("/v1/models", headers=key("sk-q"))).status_code == 200  # others unaffected

            # Token budget (100/min): 60 + the prompt fits once, not twice; 1,000 never fits.
            first = await http.post("/v1/requests", json={"body": chat}, headers=key("sk-t"))
            assert first.status_code == 202, first.text
            is_429(
                await http.post("/v1/chat/completions", json=chat, headers=key("sk-t")),
                "token_budget_exceeded",
            )
            big = {**chat, "max_tokens": 1000}
            for never in (
                await http.post("/v1/chat/completions", json=big, headers=key("sk-t")),
                await http.post(
                    "/v1/rollouts", json={**rollout, "sampling": {"max_tokens": 200}}, headers=key("sk-t")
                ),
            ):  # can never fit: 400, so clients do not retry it
                assert never.status_code == 400 and never.json()["error"]["code"] == "tokens_exceed_budget"
                assert "retry-after" not in never.headers

            # Quotas of queued and kept work.
            one = {"body": chat, "request_id": "q-1"}
            assert (await http.post("/v1/requests", json=one, headers=key("sk-q"))).status_code == 202
            assert (
                await http.post("/v1/requests", json=one, headers=key("sk-q"))
            ).status_code == 202  # a retry
            is_429(
                await http.post("/v1/requests", json={"body": chat}, headers=key("sk-q")), "too_many_queued"
            )
            ro = await http.post("/v1/rollouts", json={**rollout, "rollout_id": "r1"}, headers=key("sk-q"))
            assert ro.status_code == 202, ro.text
            again = await http.post("/v1/rollouts", json={**rollout, "rollout_id": "r1"}, headers=key("sk-q"))
            assert again.status_code == 202  # the same job, not a second one
            is_429(await http.post("/v1/rollouts", json=rollout, headers=key("sk-q")), "too_many_rollouts")
            line = json.dumps(
                {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": chat}
            )
            up = await http.post(
                "/v1/files",
                files={"file": ("in.jsonl", line.encode())},
                data={"purpose": "batch"},
                headers=key("sk-q"),
            )
            assert up.status_code == 200, up.text
            is_429(
                await http.post(
                    "/v1/files",
                    files={"file": ("b.jsonl", line.encode())},
                    data={"purpose": "batch"},
                    headers=key("sk-q"),
                ),
                "too_many_files",
            )
            batch = {
                "input_file_id": up.json()["id"],
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
            }
            assert (await http.post("/v1/batches", json=batch, headers=key("sk-q"))).status_code == 200
            is_429(await http.post("/v1/batches", json=batch, headers=key("sk-q")), "too_many_batches")
    record(
        "limits",
        "every gateway route 429 + Retry-After past the tenant's rate; token budget 100/min: a 2nd "
        "60-token request 429, a 1,000-token one refused outright; quotas of 1 queued async request, "
        "rollout, file and batch: the 2nd 429, retries of accepted ones 202",
    )
