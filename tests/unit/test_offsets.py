from __future__ import annotations

from aiokafka import TopicPartition

from shared.runtime.bus import backoff_s
from shared.runtime.consumer import OffsetTracker

TP = TopicPartition("t", 0)


def test_commit_waits_for_the_lowest_unfinished_offset() -> None:
    t = OffsetTracker()
    for o in (10, 11, 12):
        t.add(TP, o)
    assert t.committable() == {TP: 10}  # nothing done yet: position stays at the first
    t.mark_committed({TP: 10})
    t.done(TP, 12)
    t.done(TP, 11)
    assert t.committable() == {}  # 10 still in flight: 11 and 12 must not be committed
    t.done(TP, 10)
    assert t.committable() == {TP: 13}
    t.mark_committed({TP: 13})
    assert t.committable() == {}


def test_partitions_are_independent_and_forgettable() -> None:
    t = OffsetTracker()
    other = TopicPartition("t", 1)
    t.add(TP, 0)
    t.add(other, 5)
    t.done(other, 5)
    assert t.committable() == {TP: 0, other: 6}
    t.forget([other])
    assert t.committable() == {TP: 0}
    assert t.next_offset(other) is None


def test_backoff_is_bounded_and_grows() -> None:
    assert all(0 <= backoff_s(a, 100, 1000) <= 1.0 for a in range(1, 20))
    assert max(backoff_s(1, 100, 10_000) for _ in range(200)) <= 0.1
