"""Build `sy-tiny`: a small Llama model with its own tokenizer, trained on CPU on the synthetic tasks.

The pipeline needs a real model that vLLM and transformers load from a local directory, that
loads in seconds and whose answers can be checked (shared.devstack.models.tasks), without downloads.
The build trains a tokenizer, trains the model for a wall-clock budget, measures greedy accuracy
per task on held-out prompts and saves everything in Hugging Face format:

    <models_dir>/<name>/config.json, generation_config.json, model.safetensors,
                        tokenizer.json, tokenizer_config.json, special_tokens_map.json,
                        build.json   (manifest: recipe and its hash, steps, loss, accuracy, files)

Its parts: the tokenizer and chat template in tokenizer.py, the data, training loop and evaluation
in training.py; this module holds the recipe, the cache (manifest, lock) and the CLI.

Each task is trained in two formats, the chat template and plain completion text (training.py),
and both are evaluated: `eval_accuracy` (chat) and `eval_accuracy_completion` in build.json, and
`sy_eval_accuracy: {chat, completion}` in config.json.

A finished directory with the same recipe hash is reused as is. The build writes into a
temporary sibling and renames it into place, so an interrupted build never looks complete.

    python -m shared.devstack.models.build [--name sy-tiny] [--models-dir var/models]
                                  [--max-steps 1000] [--minutes M] [--seed 0] [--force]

The default budget is a number of steps, not of minutes: the same recipe then gives the same
weights and accuracy however busy the machine is (a 4-minute budget trained 905 steps on an idle
2-core host and 107 on a busy one, with every answer wrong). 1000 steps take about 4.5 minutes
on 2 idle cores.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tokenizers
import torch
import transformers
from transformers import AutoTokenizer, GenerationConfig, LlamaForCausalLM

from shared.devstack.models import tasks
from shared.devstack.models.tokenizer import (
    BuildError,
    check_template,
    save_tokenizer,
    train_tokenizer,
    write_json,
)
from shared.devstack.models.training import evaluate, model_config, train
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

# Bump when the build code changes what a recipe produces, so old caches are not reused.
FORMAT_VERSION = 1
MANIFEST = "build.json"
DEFAULT_NAME = "sy-tiny"
DEFAULT_STEPS = 1000
THREADS = 2

DEFAULT_ARCH: dict[str, Any] = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "intermediate_size": 688,
    "max_position_embeddings": 512,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
}

DEFAULT_TOKENIZER: dict[str, Any] = {
    # Byte-level BPE whose pre-tokenizer isolates every ASCII letter and digit: sums, reversals
    # and copies then work on aligned single symbols. Merges only join the rest (punctuation and
    # spaces); reserved special tokens fill the vocabulary up to `vocab_size`, so later markers
    # (tools, adapters) need no embedding resize.
    "kind": "bytelevel-bpe-alnum-isolated",
    "vocab_size": 512,
    "corpus_examples": 5000,
}

DEFAULT_TRAIN: dict[str, Any] = {
    # Task -> share of the training examples; every task listed is also evaluated.
    "tasks": {t: 1.0 for t in tasks.TASKS},
    # Share of the examples in the plain completion format (/v1/completions: `Reverse: pilot`
    # -> ` tolip`), the rest in the chat template; both formats are evaluated.
    "completion_share": 0.3,
    # Each step trains on `rows` packed rows of `row_tokens` tokens (several examples per row).
    "rows": 48,
    "row_tokens": 64,
    "lr": 1e-3,
    "min_lr_ratio": 0.05,
    "warmup_steps": 30,
    "weight_decay": 0.05,
    "betas": [0.9, 0.98],
    "grad_clip": 1.0,
    # bf16 matmuls under autocast where the CPU has native bf16 (weights and optimizer stay fp32).
    "bf16_autocast": True,
}


# --------------------------------------------------------------------------- recipe


def make_recipe(
    minutes: float | None,
    max_steps: int | None,
    seed: int,
    arch: dict[str, Any] | None = None,
    train: dict[str, Any] | None = None,
    eval_per_task: int = 50,
) -> dict[str, Any]:
    """Everything that decides the files of a build; its hash names the cache entry."""
    if not minutes and not max_steps:
        raise ValueError("give minutes or max_steps (or both): the training needs a budget")
    train_cfg = _merged(DEFAULT_TRAIN, train, "train")
    weights = train_cfg["tasks"]
    if not 0.0 <= float(train_cfg["completion_share"]) <= 1.0:
        raise ValueError(f"completion_share must be within [0, 1], got {train_cfg['completion_share']}")
    if (
        not weights
        or set(weights) - set(tasks.TASKS)
        or min(weights.values()) < 0
        or not sum(weights.values())
    ):
        raise ValueError(f"train tasks must map some of {tasks.TASKS} to weights >= 0, got {weights}")
    return {
        "format": FORMAT_VERSION,
        "arch": _merged(DEFAULT_ARCH, arch, "arch"),
        "tokenizer": dict(DEFAULT_TOKENIZER),
        "train": {**train_cfg, "minutes": minutes, "max_steps": max_steps},
        "eval_per_task": eval_per_task,
        "seed": seed,
    }


def recipe_hash(recipe: dict[str, Any]) -> str:
    blob = json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _merged(defaults: dict[str, Any], override: dict[str, Any] | None, what: str) -> dict[str, Any]:
    unknown = sorted(set(override or {}) - set(defaults))
    if unknown:
        raise ValueError(f"unknown {what} settings {unknown}; known: {sorted(defaults)}")
    return {**defaults, **(override or {})}


# --------------------------------------------------------------------------- build + cache


def build_model(
    name: str = DEFAULT_NAME,
    models_dir: Path = Path("var/models"),
    minutes: float | None = None,
    max_steps: int | None = DEFAULT_STEPS,
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
    *,
    arch: dict[str, Any] | None = None,
    train_overrides: dict[str, Any] | None = None,
    eval_per_task: int = 50,
) -> Path:
    """Build `<models_dir>/<name>/` unless a complete build of the same recipe is already there.

    `arch` and `train_overrides` change the recipe (a smaller model for tests, say); the
    files and their format stay the same.
    """
    models_dir = Path(models_dir)
    recipe = make_recipe(minutes, max_steps, seed, arch, train_overrides, eval_per_task)
    digest = recipe_hash(recipe)
    target = models_dir / name
    models_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(models_dir / f".{name}.lock"):
        if not force and is_complete(target, digest):
            log.info("model_cached", name=name, path=str(target), recipe_hash=digest)
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=models_dir))
        tmp.chmod(0o755)  # mkdtemp makes it private; the model is meant to be read by other processes
        try:
            _build_into(tmp, name, recipe, digest, progress)
            _replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("model_built", name=name, path=str(target), recipe_hash=digest)
    return target


def read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(path) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def is_complete(path: Path, digest: str | None = None) -> bool:
    """A manifest naming the recipe hash, and every file it lists present with its size."""
    manifest = read_manifest(path)
    if not manifest or (digest is not None and manifest.get("recipe_hash") != digest):
        return False
    files = manifest.get("files") or {}
    return bool(files) and all(
        (path / f).is_file() and (path / f).stat().st_size == meta["bytes"] for f, meta in files.items()
    )


def _build_into(out: Path, name: str, recipe: dict[str, Any], digest: str, progress: bool) -> None:
    seed = recipe["seed"]
    started = time.time()
    torch.set_num_threads(THREADS)
    random.seed(seed)
    torch.manual_seed(seed)
    log.info("model_build_started", name=name, recipe_hash=digest, out=str(out))

    tok = train_tokenizer(recipe["tokenizer"], seed)
    save_tokenizer(tok, out, recipe["arch"]["max_position_embeddings"])
    hf_tok = AutoTokenizer.from_pretrained(out)
    check_template(hf_tok)

    config = model_config(recipe["arch"], tok.get_vocab_size(), tok)
    model = LlamaForCausalLM(config)
    trained = [t for t, w in recipe["train"]["tasks"].items() if w > 0]
    held_out = tasks.dataset(recipe["eval_per_task"] * len(trained), seed + 1, trained)
    stats = train(model, tok, recipe["train"], seed, {e.prompt for e in held_out}, progress)
    accuracy = evaluate(model, hf_tok, held_out) if held_out else {}
    completion = evaluate(model, hf_tok, held_out, fmt="completion") if held_out else {}
    log.info("model_evaluated", name=name, accuracy=accuracy, completion_accuracy=completion)
    # Held-out greedy accuracy per task and format, beside the weights (build.json keeps it too).
    model.config.sy_eval_accuracy = {"chat": accuracy, "completion": completion}

    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    model.save_pretrained(out)
    if not (out / "model.safetensors").is_file():
        raise BuildError(f"save_pretrained wrote no model.safetensors in {out}")

    for p in out.iterdir():
        p.chmod(0o644)  # safetensors writes owner-only files; serving processes may run as others
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(out.iterdir())
        if p.is_file()
    }
    manifest = {
        "name": name,
        "recipe": recipe,
        "recipe_hash": digest,
        "seed": seed,
        **stats,
        "eval_accuracy": accuracy,
        "eval_accuracy_completion": completion,
        "eval_examples": len(held_out),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": config.vocab_size,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_seconds": round(time.time() - started, 2),
        "files": files,
    }
    write_json(out / MANIFEST, manifest)  # last: its presence marks the build complete


def _replace(tmp: Path, target: Path) -> None:
    """Move the finished build into place; an older build is moved aside first, then deleted."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{int(time.time())}")
        target.rename(old)
    tmp.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """One build per name at a time; a second caller waits, then finds the cache warm."""
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m shared.devstack.models.build", description=__doc__.splitlines()[0]
    )
    p.add_argument("--name", default=DEFAULT_NAME, help="model name, the directory under --models-dir")
    p.add_argument("--models-dir", type=Path, default=Path("var/models"))
    p.add_argument("--minutes", type=float, default=None, help="also stop after this much wall clock")
    p.add_argument(
        "--max-steps", type=int, default=DEFAULT_STEPS, help="training steps (0: by --minutes only)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="rebuild even when a matching build exists")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not (args.minutes and args.minutes > 0) and not (args.max_steps and args.max_steps > 0):
        print("give --max-steps > 0 or --minutes > 0: the training needs a budget", file=sys.stderr)
        return 2
    path = build_model(
        args.name,
        args.models_dir,
        minutes=args.minutes if args.minutes and args.minutes > 0 else None,
        max_steps=args.max_steps if args.max_steps and args.max_steps > 0 else None,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
    )
    manifest = read_manifest(path) or {}
    summary = {k: manifest.get(k) for k in ("name", "recipe_hash", "steps", "train_seconds", "final_loss")}
    accuracy = {k: manifest.get(k) for k in ("eval_accuracy", "eval_accuracy_completion")}
    print(json.dumps({"path": str(path), **summary, **accuracy}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
