"""The cores `switchyard up` keeps the services on beside a CPU engine (shared/runtime/cpus.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.runtime.cpus import engine_cpus, format_cpus, parse_cpus, pin_thread, service_cpus
from shared.runtime.procs import child_setup


def test_parse_cpu_lists() -> None:
    assert parse_cpus("0-3,6") == {0, 1, 2, 3, 6}
    assert parse_cpus(" 2 ") == {2}
    for bad in ("", "a", "3-1", "-1", "1-x"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


def test_auto_keeps_the_last_quarter_for_the_services_and_is_off_on_gpu_or_one_core() -> None:
    assert service_cpus("auto", {0, 1}, gpu=False) == {1}
    assert service_cpus("auto", set(range(16)), gpu=False) == {12, 13, 14, 15}
    assert format_cpus(service_cpus("auto", set(range(16)), gpu=False) or set()) == "12,13,14,15"
    assert service_cpus("auto", {4, 9}, gpu=False) == {9}  # a cpuset
    assert service_cpus("auto", {0}, gpu=False) is None
    assert service_cpus("auto", {0, 1, 2, 3}, gpu=True) is None
    assert service_cpus("off", {0, 1}, gpu=False) is None


def test_explicit_service_cores() -> None:
    assert service_cpus("3", {0, 1, 2, 3}, gpu=True) == {3}  # explicit wins even on a GPU host
    with pytest.raises(ValueError, match="outside"):
        service_cpus("4-7", {0, 1, 2, 3})
    with pytest.raises(ValueError, match="no core"):
        service_cpus("0-3", {0, 1, 2, 3})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pin_process_moves_every_thread_including_later_ones() -> None:
    """In a child (pinning the test process would slow the rest of the suite)."""
    target = min(os.sched_getaffinity(0))
    code = f"""
import os, threading, time
from shared.runtime.cpus import pin_process
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


def test_settings_refuse_a_malformed_cpu_list() -> None:
    from pydantic import ValidationError

    from shared.runtime.config import Settings

    assert Settings(service_cpus="12-15").service_cpus == "12-15"
    assert Settings(service_cpus="off").service_cpus == "off"
    with pytest.raises(ValidationError, match="not a CPU list"):
        Settings(service_cpus="3-1")
    with pytest.raises(ValidationError, match="not a CPU list"):
        Settings(frontend_cpus="two")


def test_launcher_stops_with_the_reason_when_the_cores_do_not_exist(tmp_path) -> None:
    from shared.devstack.launcher import Launcher
    from shared.runtime.config import Settings

    bad = Settings(var_dir=tmp_path, service_cpus="4096")
    with pytest.raises(RuntimeError, match="outside"):
        Launcher(bad, ["vllm_worker"], out=open(os.devnull, "w")).pin_cpus()  # noqa: SIM115
    assert Launcher(bad, ["gateway"]).service_cpus is None  # no engine here: nothing pinned


def test_engine_cpus_own_leaves_the_services_cores_shared_takes_every_core() -> None:
    every, services = frozenset({0, 1, 2, 3}), frozenset({3})
    assert engine_cpus("own", every, services) == {0, 1, 2}
    assert engine_cpus("shared", every, services) == every
    assert engine_cpus("own", frozenset({0}), frozenset({0})) == {0}  # never an empty set


def test_embedded_milvus_gets_every_core_when_the_services_are_pinned(tmp_path, monkeypatch) -> None:
    """Milvus' query path wakes several of its threads per query; on the services' core each
    wake-up queues behind the stack (exact query 11-19 ms there vs 6-8 ms on every core)."""
    import asyncio

    import shared.devstack.launcher as launcher_mod
    from shared.devstack.embedded.milvus import EmbeddedMilvus
    from shared.runtime.config import Settings

    made: list[frozenset[int] | None] = []

    class FakeMilvus(EmbeddedMilvus):
        def __init__(self, var_dir, cpus=None, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(var_dir, cpus=cpus, **kw)
            made.append(cpus)

        def prepare(self) -> str:
            return "http://127.0.0.1:1"

        def start(self, timeout_s: float = 180.0) -> None:
            pass

    monkeypatch.setattr(launcher_mod, "EmbeddedMilvus", FakeMilvus)
    settings = Settings(var_dir=tmp_path, cache_enabled=True)
    pinned = launcher_mod.Launcher(settings, ["cache", "vllm_worker"], out=open(os.devnull, "w"))  # noqa: SIM115
    pinned.all_cpus, pinned.service_cpus = frozenset({0, 1}), frozenset({1})  # as pin_cpus leaves it
    unpinned = launcher_mod.Launcher(settings, ["cache"], out=open(os.devnull, "w"))  # noqa: SIM115

    async def both() -> None:
        await pinned.start_milvus()
        await unpinned.start_milvus()

    asyncio.run(both())
    assert made == [frozenset({0, 1}), None]

    # The child really starts on those cores: the pre-exec hook sets the mask it inherits.
    mine = sorted(os.sched_getaffinity(0))
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
        preexec_fn=child_setup(frozenset(mine[:1])),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(mine[:1])


def test_pin_thread_moves_only_the_calling_thread() -> None:
    import threading

    before = os.sched_getaffinity(0)
    seen: list[object] = []

    def run() -> None:
        seen.append((pin_thread(frozenset({min(before)})), os.sched_getaffinity(0)))
        seen.append(pin_thread(frozenset({10_000})))  # not a core here: stays, says so

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [(True, {min(before)}), False]
    assert os.sched_getaffinity(0) == before


def test_cpu_executor_runs_the_model_in_the_engine_core_process_on_one_core() -> None:
    from services.vllm_worker.engine import cpu_executor

    assert cpu_executor("auto", 1) == "uni"
    assert cpu_executor("auto", 2) == "mp"
    assert cpu_executor("mp", 1) == "mp"
    assert cpu_executor("uni", 8) == "uni"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_engine_environment_follows_the_cores_the_engine_will_inherit() -> None:
    """The worker calls it on the engine's cores, before vLLM is imported (no GPU here)."""
    code = (
        "import os; from shared.runtime.config import Settings; "
        "from services.vllm_worker.engine import engine_environment; "
        "engine_environment(Settings(var_dir=os.environ['VAR'])); "
        "print(os.environ['VLLM_ENABLE_V1_MULTIPROCESSING'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env["VAR"] = str(Path(__file__).parents[2] / "var" / "test-engine-env")
    core = min(os.sched_getaffinity(0))
    one = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )
    every = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert (one.stdout.strip(), every.stdout.strip()) == ("0", "1")
