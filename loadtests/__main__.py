"""Run the benchmark scenarios: `python -m loadtests [scenario ...]`."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from loadtests import (
    accept_store,
    batch,
    broker_capacity,
    bus,
    cache,
    cache_eval,
    capacity,
    cost,
    lora,
    multimodal,
    pipeline,
    pools,
    profile_overhead,
    reliability,
    replies,
    rollouts,
    soak,
    stability,
)
from loadtests.harness.report import run_info, write_result

SCENARIOS = {
    "bus": bus.run,
    "pipeline-vs-engine": pipeline.run,
    "cost": cost.run,
    "capacity": capacity.run,
    "accept-store": accept_store.run,
    "lora-scaling": lora.run,
    "cache-eval": cache_eval.run,
    "cache": cache.run,
    "profile-overhead": profile_overhead.run,
    "multimodal": multimodal.run,
    "rollouts": rollouts.run,
    "batch": batch.run,
    "replies": replies.run,
    "pools": pools.run,
    "soak": soak.run,
    "stability": stability.run,
    "broker-capacity": broker_capacity.run,
    "reliability": reliability.run,  # after soak: its table takes the soak's figures
}


def main() -> None:
    ap = argparse.ArgumentParser(prog="loadtests")
    ap.add_argument("scenarios", nargs="*", help=f"any of {sorted(SCENARIOS)} (default: all)")
    ap.add_argument("--out", type=Path, default=Path("var/bench"))
    ap.add_argument("--quick", action="store_true", help="smaller workloads (smoke run)")
    ap.add_argument("--batch-lines", type=int, default=None, help="lines of the batch scenario's job (2000)")
    ap.add_argument(
        "--stability-requests", type=int, default=None, help="requests of the stability run (100000)"
    )
    ap.add_argument("--soak-minutes", type=float, default=None, help="length of the soak scenario (30)")
    args = ap.parse_args()
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        ap.error(f"unknown scenarios {unknown}; choose from {sorted(SCENARIOS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.scenarios or list(SCENARIOS):
        extra: dict[str, object] = {}
        if name == "batch":
            extra["lines"] = args.batch_lines
        if name == "stability" and args.stability_requests:
            extra["requests"] = args.stability_requests
        if name == "soak" and args.soak_minutes:
            extra["duration_s"] = args.soak_minutes * 60
        result = asyncio.run(SCENARIOS[name](args.out, quick=args.quick, **extra))
        result["run"] = run_info(f"python -m loadtests {name}" + (" --quick" if args.quick else ""))
        path = write_result(args.out, name, result)
        print(f"{name}: wrote {path}")
        print(json.dumps(result.get("summary", result), indent=2))


if __name__ == "__main__":
    main()
