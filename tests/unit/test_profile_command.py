"""`switchyard profile` itself: found from any working directory, run as an explicit tenant,
scenario defaults shown. A stand-in stack (gateway, /metrics, cache stats) answers in-process."""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shared.devstack.profiling import command
from shared.devstack.profiling.command import Ambiguous, locate, resolve_client
from shared.devstack.profiling.scenarios import SCENARIOS, help_epilog, markdown_table
from shared.runtime.auth import hash_key

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"sk-acme-1": "acme", "sk-beta-1": "beta", hash_key("sk-gamma-1"): "gamma"}


class StandIn(BaseHTTPRequestHandler):
    """Answers like a stack: streamed chat replies with a breakdown (two pools, cache hits for
    repeated prompts, adapters by name), every service's /metrics and the cache's stats."""

    seen: set[str] = set()
    keys: list[str] = []
    n = 0

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/metrics":
            self._send(b'# TYPE sy_consumer_lag gauge\nsy_consumer_lag{stage="cache"} 2\n', "text/plain")
        else:
            self._send(json.dumps({"lookups": 3, "hits_exact": 1}).encode(), "application/json")

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        StandIn.keys.append(self.headers["authorization"])
        StandIn.n += 1
        prompt = body["messages"][0]["content"]
        hit = prompt in StandIn.seen
        StandIn.seen.add(prompt)
        pool = "triton" if StandIn.n % 3 == 0 else "vllm"
        rows = [{"stage": "gateway_accept", "duration_ms": 1.0}, {"stage": "cache", "duration_ms": 5.0}]
        if not hit:
            rows += [
                {"stage": "queue", "topic": f"sy.infer.{pool}", "duration_ms": 2.0},
                {"stage": f"{pool}_worker", "duration_ms": 20.0},
                {"stage": "decode", "parent": f"{pool}_worker", "duration_ms": 15.0, "itl_ms": "3,4"},
            ]
            if body["model"] != "sy-tiny":
                rows.append({"stage": "adapter_load", "parent": f"{pool}_worker", "duration_ms": 9.0})
        info = {
            "pool": pool,
            "adapter": f"{body['model']}@1" if body["model"] != "sy-tiny" else None,
            "breakdown": rows,
            "stages_total_ms": 28.0,
            **({"cache": {"hit": True}} if hit else {}),
        }
        time.sleep(0.03)
        chunks = [
            {"choices": [{"delta": {"content": "ok"}}]},
            {"choices": [], "usage": {"completion_tokens": 2}, "switchyard": info},
        ]
        sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._send(sse.encode(), "text/event-stream")


@pytest.fixture
def stand_in() -> Iterator[str]:
    StandIn.seen, StandIn.keys, StandIn.n = set(), [], 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def profile(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["profile", *argv])
    return int(args.func(args))


@pytest.fixture
def project(tmp_path: Path, stand_in: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose stack runs (var/run/endpoints.json), and a working directory elsewhere."""
    root = tmp_path / "project"
    (root / "var" / "run").mkdir(parents=True)
    services = {n: {"url": stand_in, "pid": None, "exits": {}} for n in ("gateway", "preprocess", "cache")}
    (root / "var" / "run" / "endpoints.json").write_text(json.dumps({"services": services}))
    monkeypatch.setattr(command, "ROOT", root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for var in ("SY_VAR_DIR", "SY_ENV", "OPENAI_API_KEY", "SWITCHYARD_TENANT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SY_API_KEYS", json.dumps(KEYS))
    return root


def test_the_profile_runs_from_any_directory_with_every_chart_populated(project: Path) -> None:
    rc = profile(
        "--scenario",
        "smoke",
        "--duration",
        "2.5",
        "--tenant",
        "acme",
        "--cache-hit-ratio",
        "0.5",
        "--adapter-mix",
        '{"": 0.5, "math": 0.5}',
    )
    assert rc == 0
    assert not any(Path.cwd().iterdir())  # nothing written where it was run from
    out = project / "var" / "profile"
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 8 and "No data" not in page
    run = json.loads((out / "run.json").read_text())
    assert any("sy_consumer_lag{stage=cache}" in s.get("series", {}) for s in run["samples"])
    assert run["metrics"]["endpoints_file"] == str(project / "var" / "run" / "endpoints.json")
    assert set(StandIn.keys) == {"Bearer sk-acme-1"}  # the tenant's key, never another's
    assert run["client"]["tenant"] == "acme" and "sk-acme-1" not in json.dumps(run["client"])
    assert "Sent as tenant <b>acme</b>" in page
    assert run["overrides"] == {
        "duration_s": "--duration",
        "cache_hit_ratio": "--cache-hit-ratio",
        "adapter_mix": "--adapter-mix",
    }


def test_without_a_stack_the_lag_chart_says_where_it_looked(
    project: Path, stand_in: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "var" / "run" / "endpoints.json").unlink()
    out = Path.cwd() / "out"
    assert profile("--duration", "1", "--tenant", "beta", "--url", stand_in, "--out", str(out)) == 0
    page = (out / "report.html").read_text()
    assert "No data: no running stack&#x27;s endpoints file was found" in page
    assert str(project / "var" / "run" / "endpoints.json") in page
    assert "no stack endpoints found" in capsys.readouterr().out
    # No gateway URL either: refused, naming both places looked.
    assert profile("--duration", "1", "--tenant", "beta") == 2
    err = capsys.readouterr().err
    assert str(Path.cwd() / "var" / "run" / "endpoints.json") in err and str(project / "var") in err


def test_locate_prefers_the_working_directory_then_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, here = tmp_path / "root", tmp_path / "here"
    for base in (root, here):
        (base / "var" / "run").mkdir(parents=True)
        (base / "var" / "run" / "endpoints.json").write_text(
            json.dumps({"services": {"gateway": {"url": str(base)}}})
        )
    monkeypatch.setattr(command, "ROOT", root)
    assert locate(Path("var"), cwd=here).var_dir == here / "var"
    (here / "var" / "run" / "endpoints.json").unlink()
    found = locate(Path("var"), cwd=here)
    assert found.var_dir == root / "var" and found.services() == {"gateway": str(root)}
    assert locate(tmp_path / "elsewhere", cwd=here).endpoints is None  # an absolute SY_VAR_DIR is taken as is


def test_the_key_and_tenant_are_explicit_and_ambiguity_is_refused() -> None:
    env: dict[str, str] = {}
    c = resolve_client(KEYS, None, "acme", env)
    assert (c.key, c.tenant) == ("sk-acme-1", "acme") and "--tenant" in c.source
    c = resolve_client(KEYS, "sk-beta-1", None, env)
    assert (c.tenant, c.source) == ("beta", "--api-key")
    c = resolve_client(KEYS, "sk-gamma-1", None, env)  # a hashed key still names its tenant
    assert c.tenant == "gamma"
    c = resolve_client(KEYS, None, None, {"SWITCHYARD_TENANT": "beta"})
    assert (c.key, c.source) == ("sk-beta-1", "SY_API_KEYS, the one key of $SWITCHYARD_TENANT")
    c = resolve_client(KEYS, None, None, {"OPENAI_API_KEY": "sk-acme-1"})
    assert (c.tenant, c.source) == ("acme", "$OPENAI_API_KEY")
    c = resolve_client({"sk-only": "solo"}, None, None, env)  # one key, one tenant: nothing to choose
    assert (c.key, c.tenant) == ("sk-only", "solo") and c.shown()["api_key"] == "sk-…(7 chars)".replace(
        "…", "… "
    )
    refused = {
        "tenants ['acme', 'beta', 'gamma']: choose with --tenant": (KEYS, None, None),
        "belongs to tenant 'acme', not 'beta'": (KEYS, "sk-acme-1", "beta"),
        "is not in SY_API_KEYS here, so its tenant is unknown": (KEYS, "sk-zzz", None),
        "tenant 'gamma' has no usable key in SY_API_KEYS (its keys are stored hashed)": (KEYS, None, "gamma"),
        "tenant 'nobody' has no usable key": (KEYS, None, "nobody"),
        "tenant 'acme' has 2 keys in SY_API_KEYS: pass one with --api-key": (
            {**KEYS, "sk-acme-2": "acme"},
            None,
            "acme",
        ),
    }
    for message, (keys, key, tenant) in refused.items():
        with pytest.raises(
            Ambiguous,
            match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)"),
        ):
            resolve_client(keys, key, tenant, env)
    c = resolve_client(KEYS, "sk-remote", "far", env)  # a key this config does not know: --tenant names it
    assert c.tenant == "far"


def test_an_ambiguous_tenant_stops_the_command_before_any_load(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert profile("--duration", "1") == 2
    assert "choose with --tenant NAME or --api-key KEY" in capsys.readouterr().err
    assert StandIn.n == 0 and not (project / "var" / "profile").exists()


def test_scenario_defaults_are_in_the_help_the_docs_and_the_console(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        profile("--help")
    helptext = capsys.readouterr().out
    assert help_epilog().splitlines()[1].strip() in " ".join(helptext.split("\n"))
    for name in SCENARIOS:
        assert f"  {name} " in helptext
    assert "$SWITCHYARD_TENANT" in helptext and "$OPENAI_API_KEY" in helptext
    docs = (ROOT / "docs" / "profiling.md").read_text()
    assert markdown_table() in docs, "docs/profiling.md: paste scenarios.markdown_table()"
    profile("--duration", "1", "--tenant", "acme")
    printed = capsys.readouterr().out
    assert "as tenant acme (key sk-a… (9 chars), SY_API_KEYS, the one key of --tenant)" in printed
    assert "load closed loop, 2 in flight; duration 1 s; max_tokens 8-16" in printed
