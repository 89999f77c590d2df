"""`switchyard batch submit FILE [--wait]`: upload a JSONL file, start a batch, follow its progress."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import httpx

from shared.runtime.production import DEFAULT_API_KEY

TERMINAL = {"completed", "failed", "expired", "cancelled"}


def _base_url(args: argparse.Namespace) -> str:
    if args.base_url:
        return args.base_url.rstrip("/")
    from shared.devstack.wiring import service_url
    from shared.runtime.service import settings_or_exit

    gateway = service_url(settings_or_exit(), "gateway")
    if not gateway:
        print("no gateway: pass --base-url or start `switchyard up`", file=sys.stderr)
        raise SystemExit(2)
    return gateway + "/v1"


def _check(r: httpx.Response) -> dict:
    if r.status_code >= 400:
        try:
            msg = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = r.text[:500]
        print(f"error {r.status_code}: {msg}", file=sys.stderr)
        raise SystemExit(1)
    return r.json()


def submit(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    path = Path(args.file)
    if not path.is_file():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    key = args.api_key or os.environ.get("OPENAI_API_KEY") or DEFAULT_API_KEY
    with httpx.Client(
        base_url=_base_url(args), headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        with open(path, "rb") as f:
            up = _check(http.post("/files", files={"file": (path.name, f)}, data={"purpose": "batch"}))
        body = {
            "input_file_id": up["id"],
            "endpoint": args.endpoint,
            "completion_window": args.completion_window,
        }
        batch = _check(http.post("/batches", json=body))
        print(f"batch {batch['id']} created from {up['id']} ({up['bytes']} bytes)", file=sys.stderr)
        if not args.wait:
            print(json.dumps(batch, indent=2))
            return 0
        bar = tqdm(total=None, unit="line", desc=batch["id"], file=sys.stderr)
        while batch["status"] not in TERMINAL:
            time.sleep(args.poll)
            batch = _check(http.get(f"/batches/{batch['id']}"))
            counts = batch["request_counts"]
            if counts["total"] and bar.total != counts["total"]:
                bar.total = counts["total"]
            bar.n = counts["completed"] + counts["failed"]
            bar.set_postfix(status=batch["status"], failed=counts["failed"], refresh=False)
            bar.refresh()
        bar.close()
        print(json.dumps(batch, indent=2))
        if args.output and batch.get("output_file_id"):
            r = http.get(f"/files/{batch['output_file_id']}/content")
            Path(args.output).write_bytes(r.content)
            print(f"output written to {args.output}", file=sys.stderr)
        return 0 if batch["status"] == "completed" else 1


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("batch", help="batch jobs through the gateway (OpenAI Batch API)")
    bsub = p.add_subparsers(dest="batch_cmd", required=True)
    s = bsub.add_parser("submit", help="upload a JSONL file and start a batch job")
    s.add_argument("file")
    s.add_argument("--endpoint", default="/v1/chat/completions")
    s.add_argument("--completion-window", default="24h")
    s.add_argument("--wait", action="store_true", help="follow progress until the job ends")
    s.add_argument("--output", help="with --wait: write the output file here")
    s.add_argument("--base-url", help="gateway /v1 URL (default: the running `switchyard up`)")
    s.add_argument("--api-key", help="default: $OPENAI_API_KEY, else the local key")
    s.add_argument("--poll", type=float, default=0.5, help="seconds between progress polls")
    s.set_defaults(func=submit)
