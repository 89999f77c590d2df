"""Process wiring (shared/service.py), run in a child process: it installs signal handlers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A service with no broker (the producer is replaced) that reports what its background task saw
# and stops itself the way the launcher stops it.
CHILD = textwrap.dedent(
    """
    import asyncio, gc, json, os, signal, sys
    import shared.service as service
    from shared.config import Settings

    class NoBroker:
        def __init__(self, *a, **kw): pass
        async def start(self): pass
        async def stop(self): pass

    service.Producer = NoBroker

    async def build(settings, producer, health):
        async def report(stop):
            print(json.dumps({"frozen": gc.get_freeze_count()}), flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            await stop.wait()
        return service.Service(consumers=[], background=[report])

    asyncio.run(service.serve("probe", Settings(var_dir=sys.argv[1], health_port=0), build))
    """
)


def test_a_service_freezes_its_start_up_heap_before_serving(tmp_path: Path) -> None:
    """A full collection would scan everything start-up made (tens of ms, every request waiting)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    assert seen["frozen"] > 10_000, seen  # the interpreter's, the imports' and the build's objects
