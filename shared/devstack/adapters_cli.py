"""`switchyard adapters build|upload`: make a small LoRA adapter of a local base model, and publish
one through the registry's REST API (POST /v1/adapters, docs/adapters.md).

    switchyard adapters build NAME [--base sy-tiny] [--rank 8] [--out DIR] [--seed N]
    switchyard adapters upload DIR --name NAME [--registry URL] [--alias A ...] [--visibility V]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import httpx
from pydantic import BaseModel

from shared.adapters.registry_client import ADAPTER_FILES
from shared.runtime.production import DEFAULT_API_KEY  # `switchyard up`'s key when SY_API_KEYS is unset

CONFIG_FILE, MODEL_FILE = "adapter_config.json", "adapter_model.safetensors"


class Built(BaseModel):
    """What `adapters build` prints: the folder and the recipe of the adapter in it."""

    path: str
    name: str
    base: str
    rank: int
    target_modules: list[str]
    seed: int
    files: dict[str, int]  # file name -> bytes


def cmd_build(args: argparse.Namespace) -> int:
    from shared.devstack.models.adapters import build_adapter, seed_of
    from shared.runtime.service import settings_or_exit

    settings = settings_or_exit()
    base_dir = (Path(args.models_dir) if args.models_dir else settings.model_dir) / args.base
    if not (base_dir / "config.json").is_file():
        print(f"no base model at {base_dir}: run `switchyard models build` first", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else settings.var_dir / "adapters" / args.name
    out.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else seed_of(args.name)
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    build_adapter(base_dir, out, seed, rank=args.rank, target_modules=targets)
    built = Built(
        path=str(out),
        name=args.name,
        base=args.base,
        rank=args.rank,
        target_modules=list(targets),
        seed=seed,
        files={f: (out / f).stat().st_size for f in ADAPTER_FILES},
    )
    print(built.model_dump_json())
    return 0


def registry_url(explicit: str | None) -> str:
    """--registry, else the registry of a running `switchyard up` (its endpoints file)."""
    if explicit:
        return explicit.rstrip("/")
    from shared.devstack.wiring import service_url
    from shared.runtime.service import settings_or_exit

    registry = service_url(settings_or_exit(), "registry")
    if not registry:
        print("no registry: pass --registry or start `switchyard up`", file=sys.stderr)
        raise SystemExit(2)
    return registry


def cmd_upload(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    missing = [f for f in ADAPTER_FILES if not (folder / f).is_file()]
    if missing:
        print(f"{folder} lacks {', '.join(missing)}", file=sys.stderr)
        return 2
    key = args.api_key or os.environ.get("OPENAI_API_KEY") or DEFAULT_API_KEY
    data = {"name": args.name}
    if args.visibility:  # unset: private for a new adapter, unchanged for a new version
        data["visibility"] = args.visibility
    if args.alias:
        data["aliases"] = ",".join(args.alias)
    if args.base_model:
        data["base_model"] = args.base_model
    with (folder / CONFIG_FILE).open("rb") as config, (folder / MODEL_FILE).open("rb") as model:
        files = {
            "adapter_config": (CONFIG_FILE, config, "application/json"),
            "adapter_model": (MODEL_FILE, model, "application/octet-stream"),
        }
        r = httpx.post(
            f"{registry_url(args.registry)}/v1/adapters",
            data=data,
            files=files,
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )
    if r.status_code != 201:
        try:
            msg = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = r.text[:500]
        print(f"upload refused: {r.status_code} {msg}", file=sys.stderr)
        return 1
    print(json.dumps(r.json(), indent=2))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("adapters", help="build a small LoRA adapter; upload one to the registry")
    asub = p.add_subparsers(dest="adapters_cmd", required=True)
    b = asub.add_parser("build", help="a LoRA adapter (random, seeded weights) of a local base model")
    b.add_argument("name", help="adapter name: its default folder and seed")
    b.add_argument("--base", default="sy-tiny", help="base model under the models dir (SY_VAR_DIR/models)")
    b.add_argument("--rank", type=int, default=8, help="LoRA rank (the pool's max_lora_rank caps it)")
    b.add_argument("--targets", default="q_proj,v_proj", help="comma-separated target modules")
    b.add_argument("--seed", type=int, help="weights' seed (default: from the name)")
    b.add_argument("--out", help="adapter folder (default: SY_VAR_DIR/adapters/NAME)")
    b.add_argument("--models-dir", help="where the base models are (default: the settings' model dir)")
    b.set_defaults(func=cmd_build)
    u = asub.add_parser("upload", help="publish an adapter folder through the registry's REST API")
    u.add_argument("dir", help="folder with adapter_config.json and adapter_model.safetensors")
    u.add_argument("--name", required=True, help="adapter name in the registry")
    u.add_argument("--alias", action="append", help="point this alias at the new version (repeatable)")
    u.add_argument("--visibility", choices=("private", "public"), help="default: private (new adapter)")
    u.add_argument("--base-model", help="base model name (default: the config's base_model_name_or_path)")
    u.add_argument("--registry", help="registry URL (default: the running `switchyard up`)")
    u.add_argument("--api-key", help="default: $OPENAI_API_KEY, else the local key")
    u.set_defaults(func=cmd_upload)
