"""The processes of a running stack, for the scenarios that watch their memory (soak) or CPU
(profile-overhead): each counted with its whole process tree, so the vLLM worker counts with its
EngineCore."""

from __future__ import annotations

from typing import Any

import psutil


def tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants; none when it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (0 when it is gone)."""
    total = 0
    for p in tree(pid):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process tree so far (its reaped children's included)."""
    total = 0.0
    for p in tree(pid):
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def stack_processes(endpoints: dict[str, Any]) -> dict[str, int]:
    """name -> pid of every process the launcher runs (services and embedded servers)."""
    named = {n: int(i["pid"]) for n, i in endpoints["services"].items() if i.get("pid")}
    if endpoints.get("kafka_pid"):
        named["broker"] = int(endpoints["kafka_pid"])
    known = set(named.values())
    try:
        children = psutil.Process(int(endpoints["launcher_pid"])).children()
    except psutil.Error:
        children = []
    for child in children:  # the embedded Milvus and Triton are the launcher's other children
        if child.pid in known:
            continue
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "milvus" in cmd:
            named["milvus"] = child.pid
        elif "tritonserver" in cmd:
            named["triton"] = child.pid
        elif "redis-server" in cmd:
            named["redis"] = child.pid
    return named
