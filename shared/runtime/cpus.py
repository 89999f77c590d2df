"""Keep the stack's own processes off most of the cores when the vLLM engine runs on the same CPUs.

On a CPU host the engine's OpenMP threads want every core, and every OpenMP step waits for the
slowest thread. When the broker, the gateway and the stages get busy the kernel runs them on the
engine's cores too, and the engine waits for them. `switchyard up` therefore keeps everything but
the engine on a few cores (`SY_SERVICE_CPUS`, default: the last quarter, at least one): the
launcher moves itself there before it starts anything, so the broker, Milvus, Triton and every
service inherit them; the vLLM worker starts on the engine's cores, so the engine processes it
forks keep them, and moves its own front end over once the engine is up. The engine's cores
(`SY_ENGINE_CPUS`): `own` (default) the cores the services leave, so neither waits for the other;
`shared` every core, the services' too. Measured on two cores (docs/workers.md): `own` ran 18 % more tokens/s
at concurrency 1 and 27 % more at 8 than `shared` — an OpenMP step on a core the broker also wants
waits for it, and this small model gains little from a second thread. On a GPU host, or with `off`,
nothing is pinned. In Kubernetes the same split is the kubelet's static CPU manager policy.
"""

from __future__ import annotations

import os
from pathlib import Path


def parse_cpus(spec: str) -> frozenset[int]:
    """Turn a CPU list such as "0-3,6" into {0, 1, 2, 3, 6}."""
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


OFF = frozenset({"off", "none", "false", ""})  # SY_SERVICE_CPUS values that pin nothing


def usable_cpus(cap: int = 4) -> int:
    """Threads for a torch model beside others: the cores this process may use, at most `cap`."""
    return max(1, min(cap, len(os.sched_getaffinity(0))))


def format_cpus(cpus: frozenset[int] | set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def has_gpu() -> bool:
    """Cheap check without importing torch: an NVIDIA or ROCm device node."""
    return Path("/dev/nvidiactl").exists() or Path("/dev/kfd").exists()


def service_cpus(
    setting: str, allowed: set[int] | frozenset[int] | None = None, gpu: bool | None = None
) -> frozenset[int] | None:
    """The cores for everything but the engine under `SY_SERVICE_CPUS`: `off`, `auto` or a list.

    auto: on a CPU-only host with at least two cores, the last quarter of the allowed cores (at
    least one) — on two cores the one vLLM's own CPU default leaves to "other processes"."""
    setting = setting.strip().lower()
    if setting in OFF:
        return None
    cpus = frozenset(allowed if allowed is not None else os.sched_getaffinity(0))
    if setting == "auto":
        if (has_gpu() if gpu is None else gpu) or len(cpus) < 2:
            return None
        ordered = sorted(cpus)
        return frozenset(ordered[-max(1, len(ordered) // 4) :])
    chosen = parse_cpus(setting)
    if not chosen <= cpus:
        raise ValueError(f"SY_SERVICE_CPUS={setting!r} names CPUs outside this process's {sorted(cpus)}")
    if chosen == cpus:
        raise ValueError(f"SY_SERVICE_CPUS={setting!r} leaves the engine no core of its own")
    return chosen


def engine_cpus(mode: str, every: frozenset[int], services: frozenset[int]) -> frozenset[int]:
    """The vLLM engine's cores under `SY_ENGINE_CPUS`: `shared` every core, `own` those the services leave."""
    return every - services if mode == "own" and every - services else every


def pin_thread(cpus: frozenset[int] | set[int] | None) -> bool:
    """Move the calling thread only (a thread pool's initializer) onto `cpus`; False when the
    cpuset excludes some of them and the thread stays where the process is."""
    if not cpus:
        return True
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        return False
    return True


def pin_process(cpus: frozenset[int] | set[int], pid: int | None = None) -> int:
    """Move every thread of a process (default: this one) onto `cpus`; threads and processes it
    starts later inherit it. Returns how many threads moved."""
    base = Path(f"/proc/{pid or os.getpid()}/task")
    moved = 0
    for tid in os.listdir(base):
        try:
            os.sched_setaffinity(int(tid), cpus)
            moved += 1
        except OSError:  # the thread ended meanwhile
            pass
    return moved
