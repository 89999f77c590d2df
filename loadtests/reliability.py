"""reliability: the fault, isolation and shutdown tests as one table (scenario, load, faults,
result), beside the soak's figures when `soak` ran first (`make bench` runs it first).

The tests are the ones `make test` runs; here they run again with SWITCHYARD_RELIABILITY_OUT set,
so those that measure something (the crash test's per-phase counts, the poison test's dead
letters, the shutdown test's exit time) write it down. Pass or fail comes from pytest's JUnit
XML. Writes reliability.md (the table of docs/reliability.md, "Reliability summary") and reliability.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .harness.stack import ROOT

E2E = "tests/e2e/test_openai_api.py::"
# (pytest selector, scenario, load, faults). Order matters: the shutdown test stops its pipeline.
SUITE: list[tuple[str, str, str, str]] = [
    (
        "tests/fault/test_crash.py",
        "crash",
        "~280 async requests at a steady rate through the whole pipeline",
        "SIGKILL preprocess, router, cache, vllm_worker, gateway, broker, one at a time",
    ),
    (
        "tests/integration/test_redelivery.py",
        "redelivery",
        "a stage with records in flight",
        "SIGKILL before the offset commit",
    ),
    (
        E2E + "test_worker_sigkill_mid_generation_redelivers_and_client_sees_one_answer",
        "worker crash mid-stream",
        "one 480-token stream",
        "SIGKILL of the vLLM worker after the first tokens",
    ),
    (
        E2E + "test_sigterm_drains_open_requests_and_the_stack_exits_within_the_bound",
        "graceful shutdown",
        "4 open 128-token streams + new requests",
        "SIGTERM to `switchyard up`",
    ),
    (
        "tests/fault/test_poison.py",
        "poison",
        "1,000 malformed records + valid traffic on sy.requests",
        "random bytes, truncated protobuf, wrong types, huge fields, invalid UTF-8, bad media refs",
    ),
    (
        "tests/fault/test_api_fuzz.py",
        "API fuzzing",
        "schemathesis on the gateway's and registry's OpenAPI",
        "generated bodies, params, headers",
    ),
    (
        "tests/fault/test_limits.py",
        "admission limits",
        "bursts over rate, stream and in-flight limits",
        "over-limit tenants and a saturated replica",
    ),
    (
        "tests/unit/test_gateway_limits.py",
        "slow stream clients",
        "a stream to a client that stops reading (4 KiB window)",
        "stalled reader",
    ),
    (
        E2E + "test_async_api_with_idempotent_retry_and_tenant_isolation",
        "tenant isolation: requests",
        "async requests of two tenants",
        "tenant B asks for A's request ids",
    ),
    (
        "tests/integration/test_cache_service.py",
        "tenant isolation: cache",
        "a cached answer of tenant A",
        "tenant B sends the same prompt and a near-duplicate",
    ),
    (
        "tests/e2e/test_batches.py::test_files_and_batches_with_bad_lines",
        "tenant isolation: files and batches",
        "a batch job of tenant A (input, output, error files)",
        "tenant B gets, lists, reads and cancels them",
    ),
    (
        "tests/e2e/test_lora.py::test_tenant_isolation_for_list_get_use_delete",
        "tenant isolation: adapters",
        "a private adapter of tenant A",
        "tenant B lists, gets, uses and deletes it",
    ),
]
NAMES = {
    "tests/fault/test_crash.py": "crash",
    "tests/fault/test_poison.py": "poison",
    "tests/fault/test_limits.py": "limits",
    E2E + "test_sigterm_drains_open_requests_and_the_stack_exits_within_the_bound": "graceful_shutdown",
}


def outcomes(junit: Path) -> dict[str, tuple[int, int]]:
    """selector -> (tests passed, tests run) from pytest's JUnit XML."""
    got: dict[str, tuple[int, int]] = {}
    root = ET.parse(junit).getroot()
    for case in root.iter("testcase"):
        file = case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "").split("[")[0]
        ok = not any(child.tag in ("failure", "error") for child in case)
        skipped = any(child.tag == "skipped" for child in case)
        if skipped:
            continue
        for sel, *_ in SUITE:
            if sel == file or sel == f"{file}::{name}":
                p, n = got.get(sel, (0, 0))
                got[sel] = (p + ok, n + 1)
    return got


def soak_row(out: Path) -> dict[str, str] | None:
    path = out / "soak.json"
    if not path.is_file():
        return None
    s = json.loads(path.read_text())["summary"]
    worst = s["worst_rss_slope"]
    early = s.get("rss_slope_after_warmup_mib_per_h", {})
    steep = max(early.items(), key=lambda kv: kv[1] or 0, default=("-", None))
    stores = ", ".join(
        f"{n} +{g['grew_mib']} MiB ({g['kib_per_request']} KiB/request)"
        for n, g in s.get("stores_data_growth", {}).items()
    )
    return {
        "scenario": "soak",
        "load": f"{s['rate_rps']:g} requests/s for {s['duration_s'] / 60:.0f} min, whole stack (cache on)",
        "faults": "none (slow leaks, rare errors)",
        "result": (
            f"{'pass' if s['passed'] else 'FAIL'}: {s['completed']}/{s['requests']} answered, "
            f"{s['errors']} errors, restarts {s['restarts'] or 'none'}; e2e p50 {s['e2e_p50_ms']} ms, "
            f"p99 {s['e2e_p99_ms']} ms; RSS slope in the last third ≤ {worst['mib_per_h']} MiB/h "
            f"({worst['process']}; bound {s['max_slope_mib_per_h']:g}"
            f"{'' if s.get('slopes_judged', True) else ', not judged in a run this short'}), "
            f"after warm-up up to {steep[1]} MiB/h "
            f"({steep[0]}, fading); data kept by stores: {stores}"
        ),
    }


def table(rows: list[dict[str, str]]) -> str:
    lines = ["| scenario | load | faults | result |", "|---|---|---|---|"]
    lines += [f"| {r['scenario']} | {r['load']} | {r['faults']} | {r['result']} |" for r in rows]
    return "\n".join(lines) + "\n"


async def run(out: Path, quick: bool = False) -> dict[str, Any]:
    details = (out / "reliability").resolve()
    details.mkdir(parents=True, exist_ok=True)
    for old in details.glob("*.json"):
        old.unlink()
    junit = details / "junit.xml"
    env = dict(os.environ, SWITCHYARD_RELIABILITY_OUT=str(details))
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        + [sel for sel, *_ in SUITE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = round(time.monotonic() - t0)
    got = outcomes(junit) if junit.is_file() else {}
    rows: list[dict[str, str]] = []
    for sel, scenario, load, faults in SUITE:
        passed, n = got.get(sel, (0, 0))
        verdict = "pass" if n and passed == n else ("not run" if not n else f"FAIL ({n - passed} of {n})")
        detail = details / f"{NAMES.get(sel, '')}.json"
        measured = json.loads(detail.read_text())["result"] if sel in NAMES and detail.is_file() else ""
        rows.append(
            {
                "scenario": scenario,
                "load": load,
                "faults": faults,
                "result": f"{verdict}: {measured}" if measured else verdict,
            }
        )
    soak = soak_row(out)
    if soak:
        rows.append(soak)
    (out / "reliability.md").write_text(table(rows))
    return {
        "scenario": "reliability",
        "pytest_rc": proc.returncode,
        "pytest_tail": proc.stdout[-3000:],
        "seconds": seconds,
        "rows": rows,
        "summary": {"all_passed": all(r["result"].startswith("pass") for r in rows), "table": table(rows)},
    }
