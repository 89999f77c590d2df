"""Stream de-duplication and delta coalescing (pure logic of gateway and worker)."""

from __future__ import annotations

from switchyard.v1.events_pb2 import ChoiceDelta, StreamDelta

from services.gateway.openai_format import StreamDeduper
from shared.generation import DeltaBatcher, merge_deltas


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


def test_result_store_idempotency_isolation_and_forget(tmp_path) -> None:
    from services.gateway.replies import ResultStore

    store = ResultStore(tmp_path / "r.sqlite")
    rid, new = store.accept("id-1", "acme", "/v1/chat/completions", "key-1")
    assert (rid, new) == ("id-1", True)
    assert store.accept("id-2", "acme", "/v1/chat/completions", "key-1") == ("id-1", False)
    assert store.accept("id-3", "other", "/v1/chat/completions", "key-1") == (
        "id-3",
        True,
    )  # keys are per tenant
    assert store.get("id-1", "other") is None
    assert store.finish("id-1", "acme", "completed", {"result": {"x": 1}})
    assert store.get("id-1", "acme")["result"] == {"x": 1}
    assert not store.finish("id-1", "acme", "completed", {"result": {"x": 2}})  # first answer wins
    store.forget("id-3")
    assert store.get("id-3", "other") is None
