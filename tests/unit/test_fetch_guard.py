"""FetchWaitGuard: a consumer whose fetches come back empty while records wait gets a longer wait."""

from __future__ import annotations

from types import SimpleNamespace

from aiokafka import TopicPartition

from shared.runtime.embedded_broker import FetchWaitGuard

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


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_an_idle_reader_fetches_with_the_idle_wait_until_a_record_or_a_wake(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr("shared.runtime.embedded_broker.time.monotonic", clock)
    c = FakeConsumer(position=100, highwater=100)  # caught up
    g = FetchWaitGuard(c, "s", idle_after_s=5, idle_wait_ms=50)  # type: ignore[arg-type]
    g.observe(True)  # a reader that has had records
    for _ in range(4):
        clock.t += 1
        g.observe(False)
    assert c._fetcher._fetch_max_wait_ms == 5 and not g.idle  # 4 s without records: not yet
    clock.t += 1.5
    g.observe(False)
    assert c._fetcher._fetch_max_wait_ms == 50 and g.idle
    g.observe(True)  # the first record sets the short wait back
    assert c._fetcher._fetch_max_wait_ms == 5 and not g.idle
    clock.t += 4
    g.observe(False)
    assert c._fetcher._fetch_max_wait_ms == 5, "the idle clock restarts at the last record"
    clock.t += 2
    g.observe(False)
    assert c._fetcher._fetch_max_wait_ms == 50
    g.wake()  # this process just sent what will be answered
    assert c._fetcher._fetch_max_wait_ms == 5 and not g.idle


def test_the_idle_wait_never_lowers_a_wait_nor_applies_when_off_or_lagging(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr("shared.runtime.embedded_broker.time.monotonic", clock)
    off_path = FakeConsumer(position=1, highwater=1, wait_ms=200)
    g = FetchWaitGuard(off_path, "s", idle_after_s=1, idle_wait_ms=50)  # type: ignore[arg-type]
    clock.t += 10
    g.observe(False)
    assert off_path._fetcher._fetch_max_wait_ms == 200 and not g.idle
    disabled = FakeConsumer(position=1, highwater=1)
    g = FetchWaitGuard(disabled, "s", idle_after_s=0, idle_wait_ms=50)  # type: ignore[arg-type]
    clock.t += 10
    g.observe(False)
    assert disabled._fetcher._fetch_max_wait_ms == 5
    lagging = FakeConsumer(position=1, highwater=900)  # records wait: empty fetches are not idleness
    g = FetchWaitGuard(lagging, "s", polls=1000, idle_after_s=1, idle_wait_ms=50)  # type: ignore[arg-type]
    clock.t += 10
    g.observe(False)
    assert lagging._fetcher._fetch_max_wait_ms == 5 and not g.idle


def test_a_reader_without_a_record_since_its_start_is_idle_at_once(monkeypatch) -> None:
    """Readers of a fresh stack wait for traffic that may never come to them: they start idle."""
    clock = Clock()
    monkeypatch.setattr("shared.runtime.embedded_broker.time.monotonic", clock)
    c = FakeConsumer(position=0, highwater=0)
    g = FetchWaitGuard(c, "s", idle_after_s=30, idle_wait_ms=50)  # type: ignore[arg-type]
    assert c._fetcher._fetch_max_wait_ms == 5 and not g.idle  # the first fetch is a short one
    g.observe(False)
    assert c._fetcher._fetch_max_wait_ms == 50 and g.idle
    g.observe(True)
    clock.t += 29
    g.observe(False)
    assert c._fetcher._fetch_max_wait_ms == 5, "after a record, idle again only after idle_after_s"
