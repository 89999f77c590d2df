"""The cache through the gateway: an exact repeat and a paraphrase are answered by the gateway's
peek at the cache (its whole lookup) without a Kafka hop, with the answer the engine gave; streaming
too; a sampled request is never peeked at; the pipeline's own (duplicate) answer does not reach the
client twice."""

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

# A reply's top-level breakdown rows: answered by the peek (no Kafka hop), or, past the hold, by the
# pipeline (its cache stage reusing the peek's lookup).
BY_PEEK = ["gateway_accept", "cache_peek", "gateway_reply"]
THROUGH_PIPELINE = [
    "gateway_accept",
    "gateway_peek_hold",
    "queue",
    "cache",
    "queue",
    "gateway_reply",
]


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
    # Usually the peek answers (accept, the peek, the reply: no Kafka hop); past the hold the
    # pipeline's own answer may still win a race on a loaded machine, and then it is the one counted.
    assert top in (BY_PEEK, THROUGH_PIPELINE), info["breakdown"]

    chunks = list(client.chat.completions.create(**KW, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        first.choices[0].message.content
    )

    # Another wording of the same question (the embedder is uncased): the semantic tier, at the peek.
    para = client.chat.completions.create(
        **{**KW, "messages": [{"role": "user", "content": "what is 17+25?"}]}
    )
    pinfo = para.model_extra["switchyard"]
    assert pinfo["cache"]["hit"] and pinfo["cache"]["tier"] == "semantic", pinfo
    assert para.choices[0].message.content == first.choices[0].message.content
    ptop = [r["stage"] for r in pinfo["breakdown"] if "parent" not in r]
    # Within the hold: never produced. On a loaded machine the lookup may outlast the hold; then the
    # record goes out and the pipeline's cache stage answers from the same (awaited) lookup.
    assert ptop in (BY_PEEK, THROUGH_PIPELINE), pinfo["breakdown"]
    assert "cache_search" in {r["stage"] for r in pinfo["breakdown"]}

    sampled = client.chat.completions.create(**{**KW, "temperature": 0.7, "seed": 1})
    assert "cache" not in sampled.model_extra["switchyard"]

    # Every cacheable request was peeked at: the first (a miss; the stage went on with that
    # finding), and three hits (plain, streaming, the paraphrase); the sampled request never was.
    # A peek hit within the gateway's hold (SY_CACHE_PEEK_HOLD_MS) is never produced; one slower
    # than that is, and the pipeline's cache stage answers it again from the peek's lookup (a
    # duplicate the gateway drops).
    deadline = time.monotonic() + 30
    while (s := stats(cached))["peeks"] < 4:
        assert time.monotonic() < deadline, s
        time.sleep(0.2)
    time.sleep(1.0)  # a produced duplicate reaches the cache stage within this
    s = stats(cached)
    assert s["peek_hits"] == 3 and s["peeks"] == 4, s
    # One lookup per cacheable request, each counted at its peek (not again in the stage).
    assert (s["lookups"], s["hits_exact"], s["hits_semantic"]) == (4, 2, 1), s
