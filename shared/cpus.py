"""Give a CPU vLLM engine cores of its own when the whole stack shares one machine.

vLLM on CPU binds its OpenMP threads (and so its engine-core process) to the cores it is given
(`VLLM_CPU_OMP_THREADS_BIND`) and leaves one for "other processes". The kernel does not know the
others should stay there: when the broker, the gateway and the stages get busy it moves them onto
the engine's cores, and each time it does an OpenMP step waits. `switchyard up` therefore splits
the machine: the engine gets `engine` cores, every other process (services, broker, Milvus,
Triton, the vLLM worker's own front end) gets `services`. On a GPU host, or when the setting is
`off`, nothing is pinned. In Kubernetes the same split is the CPU manager's static policy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from shared.telemetry import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class CpuPlan:
    engine: frozenset[int]
    services: frozenset[int]

    def engine_bind(self) -> str:
        """The engine's cores in VLLM_CPU_OMP_THREADS_BIND's syntax ("0,1,2")."""
        return ",".join(str(c) for c in sorted(self.engine))

    def services_list(self) -> str:
        return ",".join(str(c) for c in sorted(self.services))


def parse_cpus(spec: str) -> frozenset[int]:
    """ "0-3,6" -> {0, 1, 2, 3, 6}."""
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"not a CPU list: {spec!r} (e.g. '0-3,6')") from None
        if a < 0 or b < a:
            raise ValueError(f"not a CPU list: {spec!r} (e.g. '0-3,6')")
        out.update(range(a, b + 1))
    if not out:
        raise ValueError(f"empty CPU list: {spec!r}")
    return frozenset(out)


def has_gpu() -> bool:
    """Cheap check without importing torch: an NVIDIA or ROCm device node."""
    return Path("/dev/nvidiactl").exists() or Path("/dev/kfd").exists()


def plan(
    setting: str, allowed: set[int] | frozenset[int] | None = None, gpu: bool | None = None
) -> CpuPlan | None:
    """The split for `SY_ENGINE_CPUS`: `off`, `auto`, or the engine's cores ("0-11").

    auto: on a CPU-only host with at least two cores, the last quarter of the allowed cores (at
    least one) go to the services and the rest to the engine — vLLM's own default keeps one core
    free, which with two cores gives the same split."""
    setting = setting.strip().lower()
    if setting in ("off", "none", "false", ""):
        return None
    cpus = frozenset(allowed if allowed is not None else os.sched_getaffinity(0))
    if setting == "auto":
        if (has_gpu() if gpu is None else gpu) or len(cpus) < 2:
            return None
        ordered = sorted(cpus)
        n_services = max(1, len(ordered) // 4)
        return CpuPlan(frozenset(ordered[:-n_services]), frozenset(ordered[-n_services:]))
    engine = parse_cpus(setting)
    if not engine <= cpus:
        raise ValueError(f"SY_ENGINE_CPUS={setting!r} names CPUs outside this process's {sorted(cpus)}")
    services = cpus - engine
    if not services:
        raise ValueError(f"SY_ENGINE_CPUS={setting!r} leaves no CPU for the other processes")
    return CpuPlan(engine, services)


def pin_process(cpus: frozenset[int] | set[int], pid: int | None = None) -> int:
    """Move every thread of a process (default: this one) onto `cpus`; threads it starts later
    inherit it. Returns how many threads moved."""
    base = Path(f"/proc/{pid or os.getpid()}/task")
    moved = 0
    for tid in os.listdir(base):
        try:
            os.sched_setaffinity(int(tid), cpus)
            moved += 1
        except OSError:  # the thread ended meanwhile
            pass
    return moved


def pin_children(cpus: frozenset[int] | set[int], engine: frozenset[int] | set[int]) -> list[int]:
    """Pin this process and its descendants to `cpus`, all but those the engine's OpenMP runtime
    already bound inside `engine` (vLLM's engine core) — helper processes the engine started
    (multiprocessing's resource tracker) move too. Returns the pids that moved."""
    import psutil

    me = psutil.Process()
    moved = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            if proc.pid != me.pid and set(os.sched_getaffinity(proc.pid)) <= engine:
                continue
            pin_process(cpus, proc.pid)
            moved.append(proc.pid)
        except (psutil.NoSuchProcess, ProcessLookupError, FileNotFoundError):
            pass
    return moved
