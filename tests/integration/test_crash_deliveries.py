"""A record that kills its process reaches the DLQ after SY_STAGE_MAX_DELIVERIES, and the rest flow.

The handler calls `os._exit(1)`: no exception for the bus to count. The test restarts the
process as a supervisor would (the launcher, Kubernetes) and counts the crashes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from switchyard.v1.events_pb2 import DeadLetter

from tests.helpers.kafka import ROOT, collect, produce, service_env


async def test_a_record_that_kills_its_process_is_dead_lettered_after_the_set_deliveries(
    broker, topics, var_dir: Path
) -> None:
    env = service_env(broker.bootstrap, topics, var_dir, SY_STAGE_MAX_DELIVERIES="3")
    before = [f"before-{i}".encode() for i in range(20)]
    after = [f"after-{i}".encode() for i in range(20)]
    await produce(broker.bootstrap, f"{topics}requests", [*before[:10], b"die", *before[10:]])
    crashes = 0
    log = open(var_dir / "crashy.log", "ab")  # noqa: SIM115
    deadline = time.monotonic() + 180
    proc = None
    try:
        while time.monotonic() < deadline:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.crashing_stage"],
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )
            try:
                proc.wait(timeout=25)
            except subprocess.TimeoutExpired:
                break  # it stays up: the record no longer kills it
            crashes += 1
            assert crashes <= 3, "the record kept killing its process past SY_STAGE_MAX_DELIVERIES"
        await produce(broker.bootstrap, f"{topics}requests", after)
        dlq = await collect(broker.bootstrap, f"{topics}dlq", 1, timeout_s=60)
        out = await collect(broker.bootstrap, f"{topics}prepared", 40, timeout_s=60)
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
        log.close()
    assert crashes == 3
    (dl,) = [DeadLetter.FromString(r.value) for r in dlq]
    assert dl.original_value == b"die" and dl.error_code == "deliveries_exhausted", dl
    assert "died 3 times" in dl.reason
    assert {r.value for r in out} == set(before) | set(after)  # neighbours were not blamed
