"""The embedded broker's RSS sampler, on real processes' /proc (this test's own and a child's)."""

from __future__ import annotations

import os
import subprocess
import sys

from prometheus_client import REGISTRY

from shared.devstack.embedded.kafka import BrokerMemoryWatch
from shared.runtime.procs import rss_bytes


def statm_rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def gauge() -> float | None:
    return REGISTRY.get_sample_value("sy_embedded_broker_rss_bytes")


def test_rss_bytes_reads_vmrss_in_bytes() -> None:
    pid = os.getpid()
    rss = rss_bytes(pid)
    assert rss is not None and rss > 10 * 2**20
    assert abs(rss - statm_rss(pid)) < 0.2 * rss  # the same figure another way, in bytes

    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert rss_bytes(done.pid) is None  # gone (reaped)


def test_warns_once_per_step_crossed_and_again_for_a_new_broker() -> None:
    lines: list[str] = []
    pid = os.getpid()
    step = rss_bytes(pid) or 0  # so this process is just past the first step
    watch = BrokerMemoryWatch(step, lines.append)

    first = watch.sample(pid)
    assert first is not None and gauge() == first
    assert len(lines) == 1 and "SY_BROKER_RSS_WARN_MB" in lines[0]
    watch.sample(pid)
    assert len(lines) == 1, "no second warning without a further step"

    ballast = bytearray(b"\x01") * (step + step // 2)  # touched: resident, ~2.5 steps in all
    try:
        grown = watch.sample(pid)
        assert grown is not None and grown >= 2 * step and gauge() == grown
        assert len(lines) == 2 and "keeps every byte" in lines[1]
    finally:
        del ballast

    child = subprocess.Popen(["sleep", "30"])
    try:
        small = watch.sample(child.pid)  # a restarted broker: a new pid, empty
        assert small is not None and small < step and gauge() == small
        assert len(lines) == 2
    finally:
        child.kill()
        child.wait()
    watch.sample(pid)
    assert len(lines) == 3, "a new broker's steps count from zero"


def test_zero_never_warns_but_still_samples() -> None:
    lines: list[str] = []
    watch = BrokerMemoryWatch(0, lines.append)
    assert watch.sample(os.getpid()) == gauge()
    assert lines == []
