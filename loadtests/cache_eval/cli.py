"""`python -m loadtests.cache_eval [--split dev|test] [--show-failures] [--json out.json]` and the
benchmark entry `run(out, quick)`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from loadtests.cache_eval.report import QUICK_SHARE, evaluate

REFUSE_TEST_FAILURES = (
    "--show-failures is for the dev split only: reading the test split's failing pairs turns them "
    "into tuning material, and its figures would stop estimating how the cache does on prompts "
    "nobody tuned for. Use --split dev --show-failures."
)


async def run(out: Path, quick: bool = False) -> dict[str, object]:
    """`python -m loadtests cache-eval`: the test split's figures (a subsample when quick)."""
    return evaluate("test", quick=quick)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m loadtests.cache_eval",
        description="Served and false-hit rates of the cache's hit decision on labelled prompt pairs.",
    )
    ap.add_argument(
        "--split", choices=["test", "dev"], default="test", help="test (reported) or dev (tuning)"
    )
    ap.add_argument("--show-failures", action="store_true", help="print failing pairs (dev only)")
    ap.add_argument("--json", default="", help="write the report here")
    ap.add_argument(
        "--floor", type=float, default=None, help="similarity floor (default: the cache's setting)"
    )
    ap.add_argument("--quick", action="store_true", help=f"subsample: {QUICK_SHARE:.0%} of each kind")
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if args.show_failures and args.split != "dev":
        ap.error(REFUSE_TEST_FAILURES)
    report = evaluate(args.split, floor=args.floor, quick=args.quick)
    if args.show_failures:
        for f in report["failures"]:  # type: ignore[attr-defined]
            print(f"{f['kind']:32s} cos {f['cosine']:.3f}  {f['a']!r} -> {f['b']!r}  [{f['id']}]")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
