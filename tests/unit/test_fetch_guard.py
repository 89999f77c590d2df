"""FetchWaitGuard: a consumer whose fetches come back empty while records wait gets a longer wait."""

from __future__ import annotations

from types import SimpleNamespace

from aiokafka import TopicPartition

from shared.bus import FetchWaitGuard

TP = TopicPartition("t", 0)


class FakeConsumer:
    def __init__(self, position: int, highwater: int | None, wait_ms: int = 5) -> None:
        self.state = SimpleNamespace(has_valid_position=True, position=position, highwater=highwater)
        assignment = SimpleNamespace(state_value=lambda tp: self.state)
        self._subscription = SimpleNamespace(subscription=SimpleNamespace(assignment=assignment))
        self._fetcher = SimpleNamespace(_fetch_max_wait_ms=wait_ms)

    def assignment(self) -> set[TopicPartition]:
        return {TP}


def test_empty_fetches_with_records_waiting_double_the_wait_up_to_a_ceiling() -> None:
    c = FakeConsumer(position=100, highwater=5000)
    g = FetchWaitGuard(c, "s", polls=3, ceiling_ms=40)  # type: ignore[arg-type]
    waits = []
    for _ in range(15):
        g.observe(False)
        waits.append(c._fetcher._fetch_max_wait_ms)
    assert waits[:3] == [5, 5, 10] and waits[-1] == 40 and max(waits) == 40


def test_idle_or_progressing_consumers_keep_their_wait() -> None:
    idle = FakeConsumer(position=100, highwater=100)  # caught up: an empty fetch is normal
    g = FetchWaitGuard(idle, "s", polls=2)  # type: ignore[arg-type]
    for _ in range(10):
        g.observe(False)
    assert idle._fetcher._fetch_max_wait_ms == 5
    busy = FakeConsumer(position=100, highwater=5000)
    g = FetchWaitGuard(busy, "s", polls=2)  # type: ignore[arg-type]
    for i in range(10):
        g.observe(i % 2 == 0)  # records keep arriving: never two empty polls in a row
    assert busy._fetcher._fetch_max_wait_ms == 5
    unknown = FakeConsumer(position=0, highwater=None)  # no fetch answered yet
    g = FetchWaitGuard(unknown, "s", polls=1)  # type: ignore[arg-type]
    g.observe(False)
    assert unknown._fetcher._fetch_max_wait_ms == 5
