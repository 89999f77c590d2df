"""sy-tiny's training data, training loop and evaluation (shared.devstack.models.build runs them).

Examples come from shared.devstack.models.tasks, packed several to a row; the answers are checked
by shared.rewards.tasks. Two formats are trained: the chat template (what /v1/chat/completions
renders) and plain completion text (what /v1/completions sends: the prompt's own tokens, no BOS,
no template), where the answer follows the prompt after a space: `Reverse: pilot` -> ` tolip`.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from tokenizers import Tokenizer
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM

from shared.devstack.models import tasks
from shared.devstack.models.tokenizer import BOS, EOS, PAD, BuildError, render
from shared.rewards.tasks import check as checked
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


# --------------------------------------------------------------------------- data


def _messages(example: tasks.Example) -> list[dict[str, str]]:
    return [{"role": "user", "content": example.prompt}, {"role": "assistant", "content": example.answer}]


COMPLETION_SEPARATOR = " "


def _encode_completion(tok: Tokenizer, example: tasks.Example) -> tuple[list[int], int]:
    """Plain-text format: the prompt's ids exactly as a completions request encodes them, then
    the separator, the answer and eos. Concatenated as ids, not re-tokenized as one string, so a
    merge across the prompt's end ("? ") cannot make training see other ids than serving does."""
    prompt = tok.encode(example.prompt).ids
    answer = tok.encode(COMPLETION_SEPARATOR + example.answer).ids
    return [*prompt, *answer, tok.token_to_id(EOS)], len(prompt)


def _encode(tok: Tokenizer, example: tasks.Example, fmt: str = "chat") -> tuple[list[int], int]:
    """Token ids of the rendered exchange, and how many of them are prompt (not trained on)."""
    if fmt == "completion":
        return _encode_completion(tok, example)
    prompt = tok.encode(render(_messages(example)[:1], add_generation_prompt=True)).ids
    full = tok.encode(render(_messages(example))).ids
    if full[: len(prompt)] != prompt:
        raise BuildError(f"prompt is not a token prefix of the full exchange: {example}")
    return full, len(prompt)


def _packed_batches(
    tok: Tokenizer, stream: Iterator[tuple[tasks.Example, str]], rows: int, width: int
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
                item = pending or _encode(tok, *next(stream))
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


def _stream(
    weights: dict[str, float], seed: int, exclude: set[str], completion_share: float = 0.0
) -> Iterator[tuple[tasks.Example, str]]:
    """Endless (example, format) pairs, tasks drawn by weight, `completion_share` of them in the
    plain completion format, never a held-out evaluation prompt."""
    rng = random.Random(seed)
    fmt_rng = random.Random(seed + 1)  # its own stream: the share does not change which examples come
    names, shares = list(weights), list(weights.values())
    while True:
        example = tasks.sample(rng.choices(names, shares)[0], rng)
        if example.prompt not in exclude:
            yield example, ("completion" if fmt_rng.random() < completion_share else "chat")


# --------------------------------------------------------------------------- training


def model_config(arch: dict[str, Any], vocab_size: int, tok: Tokenizer) -> LlamaConfig:
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
    stream = _stream(cfg["tasks"], seed, exclude, float(cfg.get("completion_share", 0.0)))
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
    model: LlamaForCausalLM,
    hf_tok: Any,
    examples: Sequence[tasks.Example],
    batch_size: int = 64,
    fmt: str = "chat",
) -> dict[str, float]:
    """Greedy accuracy per task with HF generate: prompts rendered by the saved chat template
    (`chat`) or sent as plain text, as /v1/completions sends them (`completion`)."""
    model.eval()
    right: dict[str, int] = {}
    total: dict[str, int] = {}
    for i in range(0, len(examples), batch_size):
        chunk = examples[i : i + batch_size]
        texts = [
            e.prompt
            if fmt == "completion"
            else hf_tok.apply_chat_template(_messages(e)[:1], tokenize=False, add_generation_prompt=True)
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
