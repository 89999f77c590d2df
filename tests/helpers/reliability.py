"""Result lines of the reliability tests for the summary table (`python -m loadtests reliability`).

A test calls `record(name, result)` with what it measured; the lines are written only when
SWITCHYARD_RELIABILITY_OUT names a folder (the scenario sets it), so plain test runs write nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ENV = "SWITCHYARD_RELIABILITY_OUT"


def record(name: str, result: str) -> None:
    out = os.environ.get(ENV)
    if not out:
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"{name}.json").write_text(json.dumps({"name": name, "result": result}))
