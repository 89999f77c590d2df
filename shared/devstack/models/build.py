"""Build `sy-tiny`: a small Llama model with its own tokenizer, trained on CPU on the synthetic tasks.

The pipeline needs a real model that vLLM and transformers load from a local directory, that
loads in seconds and whose answers can be checked (shared.devstack.models.tasks), without downloads.
The build trains a tokenizer, trains the model for a wall-clock budget, measures greedy accuracy
per task on held-out prompts and saves everything in Hugging Face format:

    <models_dir>/<name>/config.json, generation_config.json, model.safetensors,
                        tokenizer.json, tokenizer_config.json, special_tokens_map.json,
                        build.json   (manifest: recipe and its hash, steps, loss, accuracy, files)

A finished directory with the same recipe hash is reused as is. The build writes into a
temporary sibling and renames it into place, so an interrupted build never looks complete.

    python -m shared.devstack.models.build [--name sy-tiny] [--models-dir var/models] [--minutes 4]
                                  [--max-steps N] [--seed 0] [--force]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tokenizers
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm
from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

from shared.devstack.models import tasks
from shared.rewards.tasks import check as checked
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

# Bump when the build code changes what a recipe produces, so old caches are not reused.
FORMAT_VERSION = 1
MANIFEST = "build.json"
DEFAULT_NAME = "sy-tiny"
THREADS = 2

PAD, BOS, EOS, END = "<|pad|>", "<|bos|>", "<|eos|>", "<|end|>"
ROLES: dict[str, str] = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, END, *ROLES.values())

# One string per turn: system/user end with <|end|>, assistant turns end with eos, so a model
# that stops at eos stops after its own turn. Must match `render` exactly (checked at build).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|assistant|>' + message['content'] + eos_token }}"
    "{% elif message['role'] in ['system', 'user'] %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% else %}"
    "{{ raise_exception('unsupported role: ' + message['role']) }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

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


class BuildError(RuntimeError):
    """The build produced something that does not load or render as it must."""


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


# --------------------------------------------------------------------------- tokenizer


def render(messages: Sequence[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """The chat template in Python, for rendering training data fast."""
    parts = [BOS]
    for m in messages:
        if m["role"] == "assistant":
            parts.append(ROLES["assistant"] + m["content"] + EOS)
        else:
            parts.append(ROLES[m["role"]] + m["content"] + END)
    if add_generation_prompt:
        parts.append(ROLES["assistant"])
    return "".join(parts)


def train_tokenizer(spec: dict[str, Any], seed: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[A-Za-z0-9]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    examples = tasks.dataset(spec["corpus_examples"], seed=seed + 7919)
    corpus = [text for e in examples for text in (e.prompt, e.answer)]
    corpus += ["system", "user", "assistant"]
    trainer = trainers.BpeTrainer(
        vocab_size=spec["vocab_size"],
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    spare = spec["vocab_size"] - tok.get_vocab_size()
    if spare < 0:
        raise BuildError(f"tokenizer has {tok.get_vocab_size()} tokens, over vocab_size {spec['vocab_size']}")
    tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(spare)])
    return tok


def save_tokenizer(tok: Tokenizer, out: Path, max_len: int) -> None:
    tok.save(str(out / "tokenizer.json"))
    extra = [t for t in SPECIAL_TOKENS if t not in (PAD, BOS, EOS)]
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "additional_special_tokens": extra}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "extra_special_tokens": extra,
        "model_max_length": max_len,
        "padding_side": "left",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    _write_json(out / "tokenizer_config.json", config)
    _write_json(out / "special_tokens_map.json", special)


# --------------------------------------------------------------------------- data


def _messages(example: tasks.Example) -> list[dict[str, str]]:
    return [{"role": "user", "content": example.prompt}, {"role": "assistant", "content": example.answer}]


def _encode(tok: Tokenizer, example: tasks.Example) -> tuple[list[int], int]:
    """Token ids of the rendered exchange, and how many of them are prompt (not trained on)."""
    prompt = tok.encode(render(_messages(example)[:1], add_generation_prompt=True)).ids
    full = tok.encode(render(_messages(example))).ids
    if full[: len(prompt)] != prompt:
        raise BuildError(f"prompt is not a token prefix of the full exchange: {example}")
    return full, len(prompt)


def _packed_batches(
    tok: Tokenizer, stream: Iterator[tasks.Example], rows: int, width: int
) -> Iterator[dict[str, torch.Tensor]]:
    """Rows of `width` tokens, each holding several whole examples back to back.

    Position ids restart at every example; with no 2D attention mask transformers turns that
    into a block-diagonal causal mask, so examples never see each other. Packing instead of
    padding every example to the longest roughly doubles the examples per second. Labels cover
    only the assistant turn (answer + eos).
    """
    pad_id = tok.token_to_id(PAD)
    pending: tuple[list[int], int] | None = None
    while True:
        ids = torch.full((rows, width), pad_id, dtype=torch.long)
        labels = torch.full((rows, width), -100, dtype=torch.long)
        positions = torch.zeros((rows, width), dtype=torch.long)
        for r in range(rows):
            used = 0
            while True:
                item = pending or _encode(tok, next(stream))
                pending = None
                full, n_prompt = item
                if len(full) > width:
                    raise BuildError(f"an example of {len(full)} tokens does not fit rows of {width}")
                if used + len(full) > width:
                    pending = item  # starts the next row, so long examples are not dropped
                    break
                end = used + len(full)
                ids[r, used:end] = torch.tensor(full)
                labels[r, used + n_prompt : end] = ids[r, used + n_prompt : end]
                positions[r, used:end] = torch.arange(len(full))
                used = end
            positions[r, used:] = torch.arange(width - used)  # the padding is a segment of its own
        yield {"input_ids": ids, "position_ids": positions, "labels": labels}


def _stream(weights: dict[str, float], seed: int, exclude: set[str]) -> Iterator[tasks.Example]:
    """Endless training examples, tasks drawn by weight, never a held-out evaluation prompt."""
    rng = random.Random(seed)
    names, shares = list(weights), list(weights.values())
    while True:
        example = tasks.sample(rng.choices(names, shares)[0], rng)
        if example.prompt not in exclude:
            yield example


# --------------------------------------------------------------------------- training


def _model_config(arch: dict[str, Any], vocab_size: int, tok: Tokenizer) -> LlamaConfig:
    fields = {k: v for k, v in arch.items() if k != "rope_theta"}
    return LlamaConfig(
        vocab_size=vocab_size,
        **fields,
        hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": arch["rope_theta"]},
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=tok.token_to_id(BOS),
        eos_token_id=tok.token_to_id(EOS),
        pad_token_id=tok.token_to_id(PAD),
        dtype="float32",
    )


def _lr_factor(step: int, progress: float, warmup: int, floor: float) -> float:
    """Linear warmup over steps, then cosine decay over the budget used (steps or time)."""
    if step < warmup:
        return (step + 1) / warmup
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def bf16_supported() -> bool:
    probe = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    return bool(probe and probe())


def train(
    model: LlamaForCausalLM,
    tok: Tokenizer,
    cfg: dict[str, Any],
    seed: int,
    exclude: set[str],
    progress: bool = True,
) -> dict[str, Any]:
    """Train until `max_steps` or `minutes` of wall clock, whichever comes first."""
    budget_s = cfg["minutes"] * 60 if cfg["minutes"] else math.inf
    max_steps = cfg["max_steps"] or sys.maxsize
    bf16 = bool(cfg["bf16_autocast"]) and bf16_supported()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lr"],
        betas=tuple(cfg["betas"]),
    )
    stream = _stream(cfg["tasks"], seed, exclude)
    batches = _packed_batches(tok, stream, cfg["rows"], cfg["row_tokens"])
    model.train()
    bar = tqdm(total=cfg["max_steps"], desc="train", unit="step", disable=not progress, dynamic_ncols=True)
    step, ema, loss_value = 0, None, math.nan
    start = time.monotonic()
    while step < max_steps:
        elapsed = time.monotonic() - start
        if elapsed >= budget_s:
            break
        used = max(step / max_steps, elapsed / budget_s)
        lr = cfg["lr"] * _lr_factor(step, used, cfg["warmup_steps"], cfg["min_lr_ratio"])
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**next(batches), use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        step += 1
        loss_value = loss.item()
        ema = loss_value if ema is None else 0.95 * ema + 0.05 * loss_value
        if progress:
            if cfg["max_steps"] is None and step >= 5:
                # Steps that fit the time budget at the rate so far, for a useful ETA.
                bar.total = max(step, int(step * budget_s / (time.monotonic() - start)))
            bar.set_postfix(loss=f"{ema:.3f}", lr=f"{lr:.1e}", refresh=False)
            bar.update(1)
    bar.close()
    seconds = time.monotonic() - start
    log.info(
        "model_trained", steps=step, seconds=round(seconds, 1), loss=round(ema or math.nan, 4), bf16=bf16
    )
    return {
        "steps": step,
        "train_seconds": round(seconds, 2),
        "final_loss": ema,
        "last_loss": loss_value,
        "precision": "bf16-autocast" if bf16 else "fp32",
    }


# --------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate(
    model: LlamaForCausalLM, hf_tok: Any, examples: Sequence[tasks.Example], batch_size: int = 64
) -> dict[str, float]:
    """Greedy accuracy per task with HF generate, prompts rendered by the saved chat template."""
    model.eval()
    right: dict[str, int] = {}
    total: dict[str, int] = {}
    for i in range(0, len(examples), batch_size):
        chunk = examples[i : i + batch_size]
        texts = [
            hf_tok.apply_chat_template(_messages(e)[:1], tokenize=False, add_generation_prompt=True)
            for e in chunk
        ]
        enc = hf_tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(
            **enc,
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=hf_tok.eos_token_id,
            pad_token_id=hf_tok.pad_token_id,
        )
        completions = hf_tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for e, c in zip(chunk, completions, strict=True):
            total[e.task] = total.get(e.task, 0) + 1
            right[e.task] = right.get(e.task, 0) + int(checked(e.task, e.prompt, c))
    return {t: round(right[t] / total[t], 4) for t in total}


# --------------------------------------------------------------------------- build + cache


def build_model(
    name: str = DEFAULT_NAME,
    models_dir: Path = Path("var/models"),
    minutes: float | None = 4.0,
    max_steps: int | None = None,
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
    _check_template(hf_tok)

    config = _model_config(recipe["arch"], tok.get_vocab_size(), tok)
    model = LlamaForCausalLM(config)
    trained = [t for t, w in recipe["train"]["tasks"].items() if w > 0]
    held_out = tasks.dataset(recipe["eval_per_task"] * len(trained), seed + 1, trained)
    stats = train(model, tok, recipe["train"], seed, {e.prompt for e in held_out}, progress)
    accuracy = evaluate(model, hf_tok, held_out) if held_out else {}
    log.info("model_evaluated", name=name, accuracy=accuracy)

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
    _write_json(out / MANIFEST, manifest)  # last: its presence marks the build complete


def _check_template(hf_tok: Any) -> None:
    """The saved Jinja template must render exactly what training renders."""
    convo = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "Reverse: abc"},
    ]
    for gen in (True, False):
        got = hf_tok.apply_chat_template(convo, tokenize=False, add_generation_prompt=gen)
        if got != render(convo, add_generation_prompt=gen):
            raise BuildError(f"chat template renders {got!r}, training uses {render(convo, gen)!r}")
    ids = hf_tok(render(convo[:2], True), add_special_tokens=False)["input_ids"]
    if ids[0] != hf_tok.bos_token_id or hf_tok.convert_ids_to_tokens(ids[-1]) != ROLES["assistant"]:
        raise BuildError(f"special tokens are not atomic: {hf_tok.convert_ids_to_tokens(ids)}")


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


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m shared.devstack.models.build", description=__doc__.splitlines()[0]
    )
    p.add_argument("--name", default=DEFAULT_NAME, help="model name, the directory under --models-dir")
    p.add_argument("--models-dir", type=Path, default=Path("var/models"))
    p.add_argument("--minutes", type=float, default=4.0, help="wall-clock training budget")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="rebuild even when a matching build exists")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.minutes <= 0 and args.max_steps is None:
        print("--minutes must be > 0 unless --max-steps is given", file=sys.stderr)
        return 2
    path = build_model(
        args.name,
        args.models_dir,
        minutes=args.minutes if args.minutes > 0 else None,
        max_steps=args.max_steps,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
    )
    manifest = read_manifest(path) or {}
    summary = {k: manifest.get(k) for k in ("name", "recipe_hash", "steps", "train_seconds", "final_loss")}
    print(json.dumps({"path": str(path), **summary, "eval_accuracy": manifest.get("eval_accuracy")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
