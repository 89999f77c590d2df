"""The gateway's side of the cache peek (services/gateway/cache_peek.py), on the real FastAPI app:
an exact hit from the peek answers the client even though the pipeline has not; a miss leaves the
answer to the pipeline; requests the cache could never answer are not peeked at; the pipeline's
duplicate answer after a peek hit is dropped. The cache service's endpoint has its own test
(tests/integration/test_cache_service.py), the whole path tests/e2e/test_cache_gateway.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from switchyard.v1.envelope_pb2 import Choice, Response, Usage

from services.gateway.app import create_app
from services.gateway.backend import Backend
from services.gateway.replies import ReplyRouter
from services.gateway.requests.sqlite_store import SqliteResultStore
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.telemetry import add_timing

AUTH = {"Authorization": "Bearer sk-a"}
BODY = {"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def answered(env: Envelope, text: str, tier: str = "") -> Envelope:
    out = Envelope()
    out.CopyFrom(env)
    out.response.CopyFrom(
        Response(
            choices=[Choice(text=text, finish_reason="stop")],
            usage=Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2),
        )
    )
    if tier:
        out.cache.hit, out.cache.tier = True, tier
        add_timing(out, "cache_peek", time.time_ns(), time.time_ns())
    return out


class Fake:
    """The process side: `submit` records what the pipeline got and answers after `pipeline_s`
    (None: never); `peek` answers from `stored` (prompt text -> answer)."""

    def __init__(self, pipeline_s: float | None, stored: dict[str, str], peek_s: float = 0.0) -> None:
        self.pipeline_s, self.stored, self.peek_s = pipeline_s, stored, peek_s
        self.submitted: list[Envelope] = []
        self.peeked: list[str] = []
        self.replies = ReplyRouter()

    async def submit(self, env: Envelope, topic: str | None = None) -> None:
        self.submitted.append(env)
        if self.pipeline_s is not None:
            copy = Envelope.FromString(env.SerializeToString())

            async def later() -> None:
                await asyncio.sleep(self.pipeline_s or 0)
                self.replies.on_response(answered(copy, "from the pipeline"), time.time_ns())

            asyncio.get_running_loop().create_task(later())

    async def peek(self, request: bytes, request_id: str, tenant: str) -> Envelope | None:
        env = Envelope.FromString(request)
        assert (env.request_id, env.tenant) == (request_id, tenant)
        self.peeked.append(request_id)
        await asyncio.sleep(self.peek_s)
        text = env.request.messages[0].content
        return answered(env, self.stored[text], "exact") if text in self.stored else None


def client(tmp_path: Path, fake: Fake, hold_ms: float = 50.0) -> httpx.AsyncClient:
    settings = Settings(
        var_dir=tmp_path, api_keys={"sk-a": "acme"}, gateway_timeout_s=3, cache_peek_hold_ms=hold_ms
    )
    backend = Backend(
        settings=settings,
        submit=fake.submit,
        replies=fake.replies,
        store=SqliteResultStore(tmp_path / "results.sqlite"),
        ready=lambda: True,
        peek=fake.peek,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(create_app(backend)), base_url="http://gw")


async def test_a_peek_hit_answers_before_the_pipeline(tmp_path: Path) -> None:
    fake = Fake(pipeline_s=None, stored={"hi": "stored answer"})  # the pipeline never answers
    async with client(tmp_path, fake) as http:
        r = await http.post("/v1/chat/completions", json={**BODY, "temperature": 0}, headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "stored answer"
    assert body["switchyard"]["cache"]["tier"] == "exact"
    stages = [row["stage"] for row in body["switchyard"]["breakdown"]]
    assert stages == ["gateway_accept", "cache_peek", "gateway_reply"]
    # Answered within the hold: the request was never produced, no pipeline run at all.
    assert fake.submitted == [] and len(fake.peeked) == 1


async def test_a_peek_slower_than_the_hold_lets_the_record_go_and_still_answers(tmp_path: Path) -> None:
    """Past the hold the request is produced (the pipeline is not held back further) and the peek
    goes on beside it: its hit still answers first; a miss costs the client the hold at most."""
    fake = Fake(pipeline_s=None, stored={"hi": "stored answer"}, peek_s=0.2)
    async with client(tmp_path, fake, hold_ms=20) as http:
        r = await http.post("/v1/chat/completions", json={**BODY, "temperature": 0}, headers=AUTH)
        assert r.json()["choices"][0]["message"]["content"] == "stored answer"
        assert len(fake.submitted) == 1 and fake.peeked == [fake.submitted[0].request_id]
        fake.stored, fake.pipeline_s = {}, 0.01
        t = time.perf_counter()
        r = await http.post("/v1/chat/completions", json={**BODY, "temperature": 0}, headers=AUTH)
        assert r.json()["choices"][0]["message"]["content"] == "from the pipeline"
        assert time.perf_counter() - t < 0.15  # not the peek's 0.2 s: only the 20 ms hold
        stages = [row["stage"] for row in r.json()["switchyard"]["breakdown"]]
        assert stages[:2] == ["gateway_accept", "gateway_peek_hold"]


async def test_a_peek_hit_does_not_wait_for_the_brokers_ack(tmp_path: Path) -> None:
    """The record is still produced, but the reply does not wait for it: its answer would be a
    duplicate. A request the peek cannot answer waits for the ack as before (no ack, no 200)."""
    fake = Fake(pipeline_s=0.05, stored={"hi": "stored answer"}, peek_s=0.05)
    acked = asyncio.Event()
    submit = fake.submit

    async def slow_ack(env: Envelope, topic: str | None = None) -> None:
        await asyncio.sleep(0.5)  # the broker is slow to acknowledge
        await submit(env, topic)
        acked.set()

    fake.submit = slow_ack  # type: ignore[method-assign]
    async with client(tmp_path, fake, hold_ms=0) as http:
        t = time.perf_counter()
        r = await http.post("/v1/chat/completions", json={**BODY, "temperature": 0}, headers=AUTH)
        assert r.json()["choices"][0]["message"]["content"] == "stored answer"
        assert time.perf_counter() - t < 0.4 and not acked.is_set()
        await asyncio.wait_for(acked.wait(), 2)  # produced all the same
        assert len(fake.submitted) == 1
        acked.clear()
        t = time.perf_counter()
        r = await http.post(
            "/v1/chat/completions",
            json={**BODY, "temperature": 0, "messages": [{"role": "user", "content": "other"}]},
            headers=AUTH,
        )
        assert r.json()["choices"][0]["message"]["content"] == "from the pipeline"
        assert time.perf_counter() - t >= 0.5 and acked.is_set()


async def test_a_miss_is_answered_by_the_pipeline_and_a_late_duplicate_dropped(tmp_path: Path) -> None:
    fake = Fake(pipeline_s=0.05, stored={})
    async with client(tmp_path, fake, hold_ms=0) as http:
        r = await http.post("/v1/chat/completions", json={**BODY, "temperature": 0}, headers=AUTH)
        assert r.json()["choices"][0]["message"]["content"] == "from the pipeline"
        assert len(fake.peeked) == 1
        # A hit from the peek and then the pipeline's own answer: the client sees the first only.
        fake.stored["hi"], fake.pipeline_s = "stored answer", 0.05
        r = await http.post("/v1/chat/completions", json={**BODY, "temperature": 0}, headers=AUTH)
        assert r.json()["choices"][0]["message"]["content"] == "stored answer"
        await asyncio.sleep(0.1)
    assert len(fake.submitted) == 2  # no hold here: the pipeline ran both


async def test_requests_the_cache_cannot_answer_are_not_peeked_at(tmp_path: Path) -> None:
    fake = Fake(pipeline_s=0.0, stored={"hi": "stored answer"})
    async with client(tmp_path, fake) as http:
        for body in (
            BODY,  # temperature unset: sampled
            {**BODY, "temperature": 0.7},
            {**BODY, "temperature": 0, "n": 2},
            {
                **BODY,
                "temperature": 0,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "hi"},
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                        ],
                    }
                ],
            },
        ):
            r = await http.post("/v1/chat/completions", json=body, headers=AUTH)
            assert r.status_code == 200, r.text
            assert "cache" not in r.json()["switchyard"]
    assert fake.peeked == [] and len(fake.submitted) == 4
