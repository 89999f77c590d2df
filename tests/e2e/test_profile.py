"""`switchyard profile` against a whole stack, run from a directory outside the project.

The stack has the cache on and a tenant's LoRA adapter published, so every chart has something to
draw: lag from the services' /metrics, cache hits from repeated prompts, adapter requests and
loads. Each pool's stack of stage medians must land within 10% of that pool's measured median.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.devstack.models.adapters import build_adapter
from tests.e2e.conftest import Pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SWITCHYARD = Path(sys.executable).parent / "switchyard"  # the console script, as a user runs it


@pytest.fixture(scope="module")
def stack(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path_factory.mktemp("profile-stack"), SY_CACHE_ENABLED="true")
    try:
        p.wait_up(timeout_s=300)
        httpx.post(  # the first request also waits for every consumer group to settle
            p.base_url + "/chat/completions",
            timeout=120,
            headers={"Authorization": "Bearer sk-a"},
            json={"model": "sy-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        adapter = build_adapter(model_dir, tmp_path_factory.mktemp("adapter") / "a1", 1)
        files = {
            name: (name, (adapter / name).read_bytes())
            for name in ("adapter_model.safetensors", "adapter_config.json")
        }
        r = httpx.post(
            p.endpoints["services"]["registry"]["url"] + "/v1/adapters",
            data={"name": "tally"},
            files={
                "adapter_model": files["adapter_model.safetensors"],
                "adapter_config": files["adapter_config.json"],
            },
            headers={"Authorization": "Bearer sk-a"},
            timeout=60,
        )
        assert r.status_code == 201, r.text
        yield p
    finally:
        p.stop()


def test_profile_from_another_directory_fills_every_chart_and_each_stack_matches_its_median(
    stack: Pipeline, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [
            str(SWITCHYARD),
            "profile",
            "--scenario",
            "smoke",
            "--duration",
            "15",
            "--tenant",
            "tenant-a",
            "--cache-hit-ratio",
            "0.4",
            "--adapter-mix",
            '{"": 0.6, "tally": 0.4}',
        ],
        cwd=elsewhere,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "as tenant tenant-a (key sk… (4 chars)" in proc.stdout
        and "load closed loop, 2 in flight" in proc.stdout
    )
    assert not any(elsewhere.iterdir())  # the report goes beside the stack, not into the cwd
    out = stack.var_dir / "profile"
    a = json.loads((out / "analysis.json").read_text())
    run = json.loads((out / "run.json").read_text())
    page = (out / "report.html").read_text()
    assert a["completed"] >= 10 and a["failed"] == 0, a
    assert a["client"]["tenant"] == "tenant-a" and "Sent as tenant <b>tenant-a</b>" in page
    # Every chart drawn: nothing left without data.
    assert page.count('src="data:image/png;base64,') == 8 and "No data" not in page, [
        line for line in page.splitlines() if "No data" in line
    ]
    assert any(k.startswith("sy_consumer_lag") for s in run["samples"] for k in s.get("series", {}))
    assert a["cache_hit_rate"] > 0 and "cache hit" in a["pools"]
    assert any((r.get("switchyard") or {}).get("adapter", "") or "" for r in run["requests"])
    # Per pool, the stack of stage medians against the measured median of the same requests.
    for name, p in a["pools"].items():
        if p["requests"] >= 5:
            assert p["check"]["within_tolerance"], (name, p["check"], p["p50_stack_ms"])
    head = a["headline"]
    assert head["requests_counted"] == a["completed"] and head["top"]["stage"] in {
        r["stage"] for r in head["critical_path"]
    }
