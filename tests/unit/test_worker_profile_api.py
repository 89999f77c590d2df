"""The vLLM worker's profiling endpoints: internal token, one trace at a time, files answered.

The engine side (vLLM's start_profile/stop_profile writing a real trace) runs in
tests/e2e/test_openai_api.py::test_profile_command_writes_a_report.
"""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from services.vllm_worker.api import profile_api
from shared.runtime.config import load_settings


class Recorder:
    """Writes a trace file on stop, as the EngineCore does."""

    def __init__(self, trace_dir: Path) -> None:
        self.trace_dir, self.prefix, self.calls = trace_dir, "", []

    async def start_profile(self, prefix: str) -> None:
        self.prefix = prefix
        self.calls.append("start")

    async def stop_profile(self) -> None:
        self.calls.append("stop")
        (self.trace_dir / f"{self.prefix}_rank0.pt.trace.json.gz").write_bytes(b"x")


def test_profile_endpoints(tmp_path: Path) -> None:
    s = load_settings(var_dir=tmp_path, internal_token="tok")
    eng = Recorder(s.engine_trace_dir)
    http = TestClient(profile_api(s, eng))
    auth = {"Authorization": "Bearer tok"}
    assert http.post("/v1/profile/start").status_code == 401
    assert http.post("/v1/profile/stop", headers=auth).json()["error"]["code"] == "profile_inactive"
    assert http.post("/v1/profile/start", json={"prefix": "../x"}, headers=auth).status_code == 400
    assert http.post("/v1/profile/start", json={"prefix": "run1"}, headers=auth).status_code == 200
    again = http.post("/v1/profile/start", json={"prefix": "run2"}, headers=auth)
    assert again.status_code == 409 and again.json()["error"]["code"] == "profile_active"
    done = http.post("/v1/profile/stop", headers=auth).json()
    assert [Path(f).name for f in done["files"]] == ["run1_rank0.pt.trace.json.gz"] and eng.calls == [
        "start",
        "stop",
    ]
    off = TestClient(
        profile_api(load_settings(var_dir=tmp_path, internal_token="tok", vllm_profiler=False), eng)
    )
    assert off.post("/v1/profile/start", headers=auth).json()["error"]["code"] == "profiler_disabled"
