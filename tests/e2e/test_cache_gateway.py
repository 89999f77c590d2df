"""The cache through the gateway: an exact repeat is answered by the gateway's peek at the cache's
exact tier without a Kafka hop, the same answer the engine gave; streaming too; a sampled request
is never peeked at; the pipeline's own (duplicate) answer does not reach the client twice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.conftest import Pipeline

pytestmark = pytest.mark.slow

KW = {
    "model": "sy-tiny",
    "messages": [{"role": "user", "content": "What is 17+25?"}],
    "max_tokens": 8,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def cached(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(
        tmp_path_factory.mktemp("cached"),
        services=["gateway", "preprocess", "cache", "router", "vllm_worker"],
        SY_CACHE_ENABLED="true",
    )
    try:
        p.wait_up(timeout_s=300)
        yield p
    finally:
        p.stop()


def stats(p: Pipeline) -> dict:
    return httpx.get(p.endpoints["services"]["cache"]["url"] + "/v1/cache/stats", timeout=10).json()


def test_exact_repeat_is_answered_by_the_peek(cached: Pipeline) -> None:
    client = openai.OpenAI(base_url=cached.base_url, api_key="sk-a", max_retries=0, timeout=120)
    first = client.chat.completions.create(**KW)
    assert "cache" not in first.model_extra["switchyard"]
    deadline = time.monotonic() + 60  # the write-back from sy.responses is asynchronous
    while stats(cached).get("stored", 0) < 1:
        assert time.monotonic() < deadline, stats(cached)
        time.sleep(0.2)

    again = client.chat.completions.create(**KW)
    info = again.model_extra["switchyard"]
    assert info["cache"]["hit"] and info["cache"]["tier"] == "exact"
    assert again.choices[0].message.content == first.choices[0].message.content
    top = [r["stage"] for r in info["breakdown"] if "parent" not in r]
    # Usually the peek answers (accept, the peek, the reply: no Kafka hop); the pipeline's own
    # exact hit may still win a race on a loaded machine, and then it is its answer that counts.
    assert top in (
        ["gateway_accept", "cache_peek", "gateway_reply"],
        ["gateway_accept", "queue", "preprocess", "queue", "cache", "queue", "gateway_reply"],
    ), info["breakdown"]

    chunks = list(client.chat.completions.create(**KW, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        first.choices[0].message.content
    )

    sampled = client.chat.completions.create(**{**KW, "temperature": 0.7, "seed": 1})
    assert "cache" not in sampled.model_extra["switchyard"]

    # Two peeks hit (plain and streaming), the sampled request was never sent to peek. A peek
    # hit within the gateway's hold (SY_CACHE_PEEK_HOLD_MS) is never produced; one slower than
    # that is, and the pipeline's cache stage then answers it again from the peek's finding (an
    # exact hit whose reply the gateway drops). The sampled request goes around the cache.
    deadline = time.monotonic() + 30
    while (s := stats(cached))["peeks"] < 3:
        assert time.monotonic() < deadline, s
        time.sleep(0.2)
    time.sleep(1.0)  # a produced duplicate reaches the cache stage within this
    s = stats(cached)
    assert s["peek_hits"] == 2 and s["peeks"] == 3, s
    # One lookup per cacheable request: the first (a miss, in the stage) and the two peek hits
    # (counted at the peek, not again in the stage when one was produced).
    assert s["lookups"] == 3 and s["hits_exact"] == 2, s
