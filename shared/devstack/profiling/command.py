"""`switchyard profile`: its flags, where the running stack is, and who the load runs as.

Why this much care: the command is often run from another directory than the stack's, and a
relative `var/` then names nothing, which once left the lag, cache and adapter charts silently
empty. And the load must run as a tenant the user chose: the first configured key may be another
tenant's. So the stack is looked up in the working directory and in the project root (both
printed when neither has one), and the key and tenant are explicit or unambiguous, and printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from shared.runtime.auth import HASH_PREFIX, tenant_for_key

from .scenarios import FLAGS, SCENARIOS, Scenario, describe, help_epilog

ROOT = Path(__file__).resolve().parents[3]  # the project: where `make run` starts the stack
KEY_ENV, TENANT_ENV = "OPENAI_API_KEY", "SWITCHYARD_TENANT"


class Stack(BaseModel):
    """A running `switchyard up` as its endpoints file describes it (or none found)."""

    var_dir: Path
    endpoints_path: Path | None = None
    endpoints: dict[str, Any] | None = None
    looked: list[Path] = []

    def services(self) -> dict[str, str]:
        return {n: i["url"] for n, i in (self.endpoints or {}).get("services", {}).items()}

    def cwd(self) -> Path:
        """The directory the stack runs in (its relative paths, e.g. engine traces, start there)."""
        ep = self.endpoints or {}
        for pid in (((ep.get("services") or {}).get("vllm_worker") or {}).get("pid"), ep.get("launcher_pid")):
            if pid:
                try:
                    return Path(os.readlink(f"/proc/{pid}/cwd"))
                except OSError:
                    continue
        return self.var_dir.parent


def locate(var_dir: Path, cwd: Path | None = None) -> Stack:
    """Find the running stack's endpoints file: `var_dir` as given if absolute, else under the
    working directory, then under the project root."""
    cwd = cwd or Path.cwd()
    bases = [var_dir] if var_dir.is_absolute() else [cwd / var_dir, ROOT / var_dir]
    bases = [b.resolve() for b in bases]
    bases = [b for i, b in enumerate(bases) if b not in bases[:i]]
    for base in bases:
        path = base / "run" / "endpoints.json"
        if path.is_file():
            return Stack(
                var_dir=base, endpoints_path=path, endpoints=json.loads(path.read_text()), looked=bases
            )
    return Stack(var_dir=bases[-1], looked=bases)


class Client(BaseModel):
    key: str
    tenant: str
    source: str

    def shown(self) -> dict[str, str]:
        """What the report and the console print: the key masked."""
        return {"tenant": self.tenant, "api_key": mask(self.key), "source": self.source}


class Ambiguous(ValueError):
    """The key or tenant to use cannot be told from what was given."""


def mask(key: str) -> str:
    return key[: min(6, len(key) // 2)] + "…" + f" ({len(key)} chars)"


def resolve_client(
    api_keys: dict[str, str], key: str | None, tenant: str | None, env: dict[str, str]
) -> Client:
    """The key and tenant the load runs as: `--api-key`/`--tenant`, else $OPENAI_API_KEY and
    $SWITCHYARD_TENANT, else the one plain key of SY_API_KEYS when it holds exactly one tenant.
    Anything that could mean two tenants is refused."""
    key_src = "--api-key" if key else (f"${KEY_ENV}" if env.get(KEY_ENV) else None)
    key = key or env.get(KEY_ENV) or None
    tenant_src = "--tenant" if tenant else (f"${TENANT_ENV}" if env.get(TENANT_ENV) else None)
    tenant = tenant or env.get(TENANT_ENV) or None
    if key:
        owner = tenant_for_key(api_keys, key)
        if owner and tenant and owner != tenant:
            raise Ambiguous(
                f"the API key ({key_src}) belongs to tenant {owner!r}, not {tenant!r} ({tenant_src})"
            )
        if not owner and not tenant:
            raise Ambiguous(
                f"the API key ({key_src}) is not in SY_API_KEYS here, so its tenant is unknown: "
                "name it with --tenant (the gateway still checks the key)"
            )
        return Client(key=key, tenant=owner or str(tenant), source=str(key_src))
    plain = {k: t for k, t in api_keys.items() if not k.startswith(HASH_PREFIX)}
    if tenant:
        mine = [k for k, t in plain.items() if t == tenant]
        if len(mine) == 1:
            return Client(key=mine[0], tenant=tenant, source=f"SY_API_KEYS, the one key of {tenant_src}")
        if mine:
            raise Ambiguous(f"tenant {tenant!r} has {len(mine)} keys in SY_API_KEYS: pass one with --api-key")
        hashed = any(t == tenant for t in api_keys.values())
        raise Ambiguous(
            f"tenant {tenant!r} has no usable key in SY_API_KEYS"
            + (" (its keys are stored hashed)" if hashed else "")
            + ": pass it with --api-key"
        )
    tenants = sorted(set(api_keys.values()))
    if len(tenants) == 1 and len(plain) == 1:
        (only,) = plain
        return Client(key=only, tenant=tenants[0], source="SY_API_KEYS (its only key)")
    raise Ambiguous(
        f"SY_API_KEYS holds {len(api_keys)} keys of tenants {tenants}: choose with --tenant NAME "
        f"or --api-key KEY (or ${TENANT_ENV} / ${KEY_ENV})"
    )


def scenario_of(args: argparse.Namespace) -> tuple[Scenario, dict[str, str]]:
    """The named scenario with the flags' overrides, and which flag set which field."""
    over: dict[str, Any] = {}
    if args.duration is not None:
        over["duration_s"] = args.duration
    if args.concurrency is not None:
        over.update(concurrency=args.concurrency, mode="concurrency")
    elif args.rate is not None:
        over.update(rate_rps=args.rate, mode="rate")
    if args.cache_hit_ratio is not None:
        over["cache_hit_ratio"] = args.cache_hit_ratio
    if args.adapter_mix:
        over["adapter_mix"] = json.loads(args.adapter_mix)
    flag_of = {**FLAGS, "mode": "--concurrency" if args.concurrency is not None else "--rate"}
    sc = Scenario.model_validate({**SCENARIOS[args.scenario].model_dump(), **over})
    return sc, {k: flag_of[k] for k in over}


def run_profile(args: argparse.Namespace) -> int:
    from shared.runtime.service import settings_or_exit

    from . import report, runner

    settings = settings_or_exit()
    stack = locate(settings.var_dir)
    out = Path(args.out).resolve() if args.out else stack.var_dir / "profile"
    if args.report_only:
        path, a = report.write(json.loads(Path(args.report_only).read_text()), out)
        print(f"report: {path}\n{json.dumps(a['dominant_stage'])}")
        return 0
    if args.scenario not in SCENARIOS:
        print(f"unknown scenario {args.scenario!r}; choose from {sorted(SCENARIOS)}", file=sys.stderr)
        return 2
    services = stack.services()
    gateway = args.url or services.get("gateway")
    if not gateway:
        looked = ", ".join(str(p / "run" / "endpoints.json") for p in stack.looked)
        print(f"no gateway: no running `switchyard up` found ({looked}); pass --url", file=sys.stderr)
        return 2
    try:
        client = resolve_client(settings.api_keys, args.api_key, args.tenant, dict(os.environ))
    except Ambiguous as exc:
        print(f"switchyard profile: {exc}", file=sys.stderr)
        return 2
    sc, overrides = scenario_of(args)
    shown = client.shown()
    print(
        f"profile {sc.name} against {gateway} as tenant {shown['tenant']} (key {shown['api_key']}, {shown['source']})"
    )
    print("  " + "; ".join(f"{k} {v}" for k, v in describe(sc).items()))
    if not services:
        print(f"  no stack endpoints found under {[str(p) for p in stack.looked]}: no lag or cache metrics")
    extra = {
        "client": shown,
        "overrides": overrides,
        "metrics": {
            "endpoints_file": str(stack.endpoints_path) if stack.endpoints_path else None,
            "why_none": None
            if services
            else "no running stack's endpoints file was found ("
            + ", ".join(str(p / "run" / "endpoints.json") for p in stack.looked)
            + "): only the gateway URL was known, so no service's /metrics was sampled",
        },
    }
    load = runner.run(sc, gateway, services, client.key, extra=extra)
    if args.engine_trace:
        from . import engine_trace

        worker = services.get("vllm_worker")
        if not worker:
            load.close()
            print("--engine-trace needs the vLLM worker of a running `switchyard up`", file=sys.stderr)
            return 2
        data, answer = asyncio.run(
            engine_trace.capture(
                load,
                worker,
                settings.internal_token.get_secret_value(),
                delay_s=min(2.0, sc.duration_s / 4),
                window_s=min(args.engine_trace_s, sc.duration_s / 2),
                prefix=f"sy-{sc.name}-{int(time.time())}",
            )
        )
        data["engine_trace"] = engine_trace.collect(answer, out, base=stack.cwd())
    else:
        data = asyncio.run(load)
    if stack.endpoints_path:  # restarts during the run, by cause (SIGKILL: most often the OOM killer)
        now = json.loads(stack.endpoints_path.read_text())
        data["service_exits"] = {n: i.get("exits", {}) for n, i in now["services"].items()}
    runner.save(data, out)
    path, a = report.write(data, out)
    print(f"report: {path}")
    print(json.dumps({k: a[k] for k in ("completed", "failed", "tokens_per_s", "e2e_ms", "dominant_stage")}))
    return 0 if a["completed"] else 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="load a running stack with a scenario; HTML + JSON report",
        description="Load a running stack with a named scenario, record every request and the "
        "services' metrics, and write run.json, analysis.json and report.html.",
        epilog=help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scenario", default="smoke", help=f"one of {', '.join(SCENARIOS)} (default: smoke)")
    p.add_argument("--duration", type=float, help="seconds (overrides the scenario)")
    p.add_argument("--rate", type=float, help="open loop: requests per second")
    p.add_argument("--concurrency", type=int, help="closed loop: requests in flight")
    p.add_argument("--cache-hit-ratio", type=float, help="share of repeated prompts")
    p.add_argument("--adapter-mix", help='JSON, e.g. {"": 0.5, "math": 0.5}')
    p.add_argument("--url", help="gateway URL (default: the running `switchyard up`)")
    p.add_argument("--api-key", help=f"the key the load sends (default: ${KEY_ENV}; else --tenant's one key)")
    p.add_argument(
        "--tenant",
        help=f"the tenant the load runs as (default: ${TENANT_ENV}); needed when SY_API_KEYS has several",
    )
    p.add_argument(
        "--out", help="where run.json, analysis.json, report.html go (default: <stack's var>/profile)"
    )
    p.add_argument(
        "--engine-trace",
        action="store_true",
        help="capture a torch profiler trace of the vLLM engine during the run (linked in the report)",
    )
    p.add_argument("--engine-trace-s", type=float, default=3.0, help="length of that trace window")
    p.add_argument("--report-only", metavar="RUN_JSON", help="only render the report of a recorded run")
    p.set_defaults(func=run_profile)
