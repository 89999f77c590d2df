"""Stream de-duplication and delta coalescing (pure logic of gateway and worker)."""

from __future__ import annotations

import pytest
from switchyard.v1.events_pb2 import ChoiceDelta, StreamDelta

from shared.generation.engine_io import DeltaBatcher, merge_deltas
from shared.openai.format import StreamDeduper


def delta(text: str, text_offset: int, index: int = 0, tokens: int = 1) -> StreamDelta:
    return StreamDelta(
        request_id="r",
        choices=[ChoiceDelta(index=index, text=text, text_offset=text_offset, token_ids=list(range(tokens)))],
    )


def test_regenerated_attempt_is_forwarded_once_even_with_other_boundaries() -> None:
    d = StreamDeduper(1)
    assert d.new_text(delta("Hel", 0)) == [(0, "Hel")]
    assert d.new_text(delta("lo", 3)) == [(0, "lo")]
    # the worker died; the new attempt restarts from 0 with different coalescing
    assert d.new_text(delta("He", 0)) == []
    assert d.new_text(delta("llo wo", 2)) == [(0, " wo")]
    assert d.new_text(delta("rld", 8)) == [(0, "rld")]
    assert d.sent_text == ["Hello world"]


def test_gap_is_left_for_the_final_response() -> None:
    d = StreamDeduper(2)
    d.new_text(delta("ab", 0))
    assert d.new_text(delta("ef", 4)) == []  # "cd" not seen yet
    assert d.remainder(0, "abcdef") == "cdef"
    assert d.new_text(delta("x", 0, index=1)) == [(1, "x")]


def test_batcher_sends_first_delta_at_once_then_coalesces() -> None:
    b = DeltaBatcher(flush_ms=10_000)
    first = b.add(delta("a", 0))
    assert first is not None and first.choices[0].text == "a"
    assert b.add(delta("b", 1)) is None
    assert b.add(delta("c", 2, tokens=2)) is None
    rest = b.flush()
    assert rest is not None
    (c,) = rest.choices
    assert (c.text, c.text_offset, len(c.token_ids)) == ("bc", 1, 3)
    assert b.flush() is None


def test_merge_keeps_choices_apart() -> None:
    m = merge_deltas([delta("a", 0, 0), delta("x", 0, 1), delta("b", 1, 0)])
    assert {c.index: c.text for c in m.choices} == {0: "ab", 1: "x"}


# ---------------------------------------------------------------- logprobs


def _vllm_step(index: int, toks: list[tuple[int, str, float]], top: list[list[tuple[int, str, float]]]):
    """An engine step shaped like vLLM's: per token a dict of Logprob (sampled + top k by rank)."""
    from shared.generation.engine_io import EngineStep, Logprob, StepOutput

    dicts = []
    for (tid, text, lp), alts in zip(toks, top, strict=True):
        d = {t: Logprob(x, rank, s) for rank, (t, s, x) in enumerate(alts, start=1)}
        d.setdefault(tid, Logprob(lp, 99, text))
        dicts.append(d)
    return EngineStep(
        outputs=[StepOutput(index, [t for t, _, _ in toks], "".join(s for _, s, _ in toks), None, dicts)]
    )


def test_accumulator_keeps_logprobs_with_token_texts_and_ranked_top_k() -> None:
    from shared.generation.engine_io import Accumulator

    acc = Accumulator(1, "w", top_logprobs=2)
    d1 = acc.add(_vllm_step(0, [(7, "He", -0.125)], [[(7, "He", -0.125), (8, "Ha", -2.5)]]), "r", "t")
    d2 = acc.add(
        _vllm_step(0, [(9, "llo", -1.5)], [[(4, "y", -0.375), (5, "p", -1.25)]]), "r", "t"
    )  # sampled token outside the top 2 (rank 99): not listed among the alternatives
    assert [(x.token_id, x.token, x.logprob) for x in d1.choices[0].logprobs] == [(7, "He", -0.125)]
    assert [x.token for x in d2.choices[0].logprobs[0].top] == ["y", "p"]
    c = acc.response("vllm").choices[0]
    assert list(c.logprobs) == [-0.125, -1.5]  # the float list rollouts read
    assert [(t.token, [x.token for x in t.top]) for t in c.token_logprobs] == [
        ("He", ["He", "Ha"]),
        ("llo", ["y", "p"]),
    ]
    merged = merge_deltas([d1, d2])
    assert [x.token for x in merged.choices[0].logprobs] == ["He", "llo"]
    # Not asked for (rollouts' plain logprobs still kept): no entries on deltas or the response.
    quiet = Accumulator(1, "w")
    d = quiet.add(_vllm_step(0, [(7, "He", -0.125)], [[]]), "r", "t")
    assert not d.choices[0].logprobs and not quiet.response("p").choices[0].token_logprobs
    assert list(quiet.response("p").choices[0].logprobs) == [pytest.approx(-0.125)]


def test_openai_logprob_shapes_for_chat_and_completions() -> None:
    from switchyard.v1.envelope_pb2 import TokenLogprob, TopLogprob

    from shared.openai.format import choice_logprobs
    from shared.runtime.envelope import Envelope, Kind

    lps = [
        TokenLogprob(
            token_id=7, token="Hé", logprob=-0.5, top=[TopLogprob(token_id=7, token="Hé", logprob=-0.5)]
        ),
        TokenLogprob(
            token_id=9, token="llo", logprob=-1.0, top=[TopLogprob(token_id=3, token="y", logprob=-0.25)]
        ),
    ]
    env = Envelope(kind=Kind.KIND_CHAT)
    assert choice_logprobs(env, lps) is None  # not asked for
    env.request.sampling.logprobs = True
    chat = choice_logprobs(env, lps)
    assert chat["content"][0] == {
        "token": "Hé",
        "logprob": -0.5,
        "bytes": [72, 195, 169],
        "top_logprobs": [{"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169]}],
    }
    env.kind = Kind.KIND_COMPLETION
    comp = choice_logprobs(env, lps, text_offset=4)
    assert comp["tokens"] == ["Hé", "llo"]
    assert comp["token_logprobs"] == [-0.5, -1.0]
    assert comp["top_logprobs"] == [{"Hé": -0.5}, {"y": -0.25, "llo": -1.0}]
    assert comp["text_offset"] == [4, 6]


def test_deduper_forwards_each_tokens_logprob_once_across_attempts() -> None:
    from switchyard.v1.envelope_pb2 import TokenLogprob

    def lp_delta(offset: int, toks: list[str]) -> StreamDelta:
        return StreamDelta(
            choices=[
                ChoiceDelta(
                    index=0,
                    token_offset=offset,
                    token_ids=list(range(len(toks))),
                    logprobs=[TokenLogprob(token=t, logprob=-1.0) for t in toks],
                )
            ]
        )

    d = StreamDeduper(1)
    new, off = d.new_logprobs(lp_delta(0, ["a", "bc"]))[0]
    assert [t.token for t in new] == ["a", "bc"] and off == 0
    assert d.new_logprobs(lp_delta(0, ["a"])) == {}  # regenerated attempt: already sent
    new, off = d.new_logprobs(lp_delta(1, ["bc", "d"]))[0]
    assert [t.token for t in new] == ["d"] and off == 3
    assert d.new_logprobs(lp_delta(5, ["z"])) == {}  # a gap: left for the final response
    final = [TokenLogprob(token=t) for t in ["a", "bc", "d", "e", "z"]]
    rest, off = d.remaining_logprobs(0, final)
    assert [t.token for t in rest] == ["e", "z"] and off == 4


def test_tokens_handed_over_together_get_times_spread_since_the_last_one(monkeypatch) -> None:
    """vLLM's --stream-interval hands the worker several tokens per output: the breakdown's ITL is
    the mean interval within a chunk, not one real gap and zeros."""
    from shared.generation.engine_io import Accumulator, EngineStep, StepOutput, spread

    assert spread(100, 140, 4) == [110, 120, 130, 140] and spread(100, 100, 2) == [100, 100]
    clock = iter([1_000_000, 5_000_000, 17_000_000])
    monkeypatch.setattr("shared.generation.engine_io.time.time_ns", lambda: next(clock))
    acc = Accumulator(1, "w")
    acc.add(EngineStep(outputs=[StepOutput(0, [1], "a")]), "r", "t")  # the first token, alone
    acc.add(EngineStep(outputs=[StepOutput(0, [2, 3, 4], "bcd")]), "r", "t")  # three at 17 ms
    assert acc.choices[0].token_times == [5_000_000, 9_000_000, 13_000_000, 17_000_000]
    assert acc.itl_ms() == [4.0, 4.0, 4.0]


async def test_a_generation_ends_without_waiting_for_its_deltas_acks() -> None:
    """The final response carries the whole text and the gateway fills gaps from it, so the worker
    sends it without a broker round trip for the last delta's ack; a lost delta is counted."""
    import asyncio

    from shared.generation.worker import StreamPublisher
    from shared.runtime.envelope import Envelope

    class Broker:  # hands out the ack futures so the test decides when (and how) they resolve
        def __init__(self) -> None:
            self.acks: list[asyncio.Future[object]] = []

        async def send_soon(self, record: object) -> asyncio.Future[object]:
            self.acks.append(asyncio.get_running_loop().create_future())
            return self.acks[-1]

    env = Envelope(request_id="r")
    env.request.sampling.stream = True
    broker = Broker()
    pub = StreamPublisher(broker, "sy.stream", env, flush_ms=10_000)  # type: ignore[arg-type]
    await pub.add(delta("a", 0))  # the first delta goes at once
    await pub.add(delta("b", 1))  # coalesced
    await asyncio.wait_for(pub.close(), timeout=1)  # the tail goes out; nothing acked yet
    assert len(broker.acks) == 2 and not any(a.done() for a in broker.acks)
    broker.acks[0].set_result(None)
    broker.acks[1].set_exception(ConnectionError("broker gone"))
    await asyncio.sleep(0)
    assert pub.failed == 1
