"""The engine/services CPU split `switchyard up` applies on a CPU host (shared/cpus.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shared.cpus import CpuPlan, parse_cpus, plan


def test_parse_cpu_lists() -> None:
    assert parse_cpus("0-3,6") == {0, 1, 2, 3, 6}
    assert parse_cpus(" 2 ") == {2}
    for bad in ("", "a", "3-1", "-1", "1-x"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


def test_auto_leaves_a_quarter_to_the_services_and_is_off_on_gpu_or_one_core() -> None:
    assert plan("auto", {0, 1}, gpu=False) == CpuPlan(frozenset({0}), frozenset({1}))
    p = plan("auto", set(range(16)), gpu=False)
    assert p is not None and p.engine == set(range(12)) and p.services == set(range(12, 16))
    assert p.engine_bind() == "0,1,2,3,4,5,6,7,8,9,10,11" and p.services_list() == "12,13,14,15"
    assert plan("auto", {4, 9}, gpu=False) == CpuPlan(frozenset({4}), frozenset({9}))  # a cpuset
    assert plan("auto", {0}, gpu=False) is None
    assert plan("auto", {0, 1, 2, 3}, gpu=True) is None
    assert plan("off", {0, 1}, gpu=False) is None


def test_explicit_engine_cores() -> None:
    p = plan("0-2", {0, 1, 2, 3}, gpu=True)  # explicit wins even on a GPU host
    assert p == CpuPlan(frozenset({0, 1, 2}), frozenset({3}))
    with pytest.raises(ValueError, match="outside"):
        plan("0-7", {0, 1, 2, 3})
    with pytest.raises(ValueError, match="no CPU"):
        plan("0-3", {0, 1, 2, 3})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pin_process_moves_every_thread_including_later_ones() -> None:
    """In a child (pinning the test process would slow the rest of the suite)."""
    target = min(os.sched_getaffinity(0))
    code = f"""
import os, threading, time
from shared.cpus import pin_process
stop = threading.Event()
before = threading.Thread(target=stop.wait); before.start()
moved = pin_process({{{target}}})
after = threading.Thread(target=stop.wait); after.start()
sets = {{int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}}
stop.set()
print(moved, len(sets), all(s == {{{target}}} for s in sets.values()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    moved, threads, same = out.stdout.split()
    assert int(moved) >= 2 and int(threads) >= 3 and same == "True", out.stdout
