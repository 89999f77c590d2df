"""The audio half of `sy-vlm`: a small Whisper-style encoder trained in front of sy-tiny's frozen
decoder on synthetic clips whose answers can be checked (vlm.py builds the model and calls this).

Two tasks, each asked in a few phrasings:

- **beeps**: 1-5 short tone bursts (random pitch 500-1500 Hz, length, gaps, level, start, a
  little noise) in a 1.5-3 s clip; "How many beeps?" -> `3`.
- **pitch**: one steady tone in a band, low (180-350 Hz), mid (650-1100 Hz) or high
  (2200-3800 Hz); "Is the tone low, mid or high?" -> `mid`.

The encoder's forward pass is `deploy/triton/models/sy-tiny/1/audio_tower.py` (the one definition
the Triton model runs too); LLaVA/Qwen2-Audio's first stage: only the encoder and projector are
trained, the decoder stays as built. Held-out greedy accuracy per task goes into config.json
(`eval_audio_accuracy`).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

RATE = 16000
AUDIO: dict[str, Any] = {
    # audio_config in config.json: what audio_tower.py and preprocess's `sy_audio` rule read.
    "model_type": "sy_audio",
    "sample_rate": RATE,
    "n_fft": 400,
    "hop_length": 160,
    "n_mels": 40,
    "conv_stride": 2,
    "pool": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "heads": 4,
}
AUDIO_TRAIN = {"steps": 400, "batch": 16, "lr": 2e-3, "seed": 0}
BANDS = {"low": (180.0, 350.0), "mid": (650.0, 1100.0), "high": (2200.0, 3800.0)}
MAX_BEEPS = 5
QUESTIONS: dict[str, tuple[str, ...]] = {
    "beeps": ("How many beeps?", "How many beeps are there?", "Count the beeps."),
    "pitch": ("Is the tone low, mid or high?", "Is the pitch low, mid or high?", "Which pitch band?"),
}


def tokens_per_second(cfg: dict[str, Any] = AUDIO) -> float:
    return cfg["sample_rate"] / (cfg["hop_length"] * cfg["conv_stride"] * cfg["pool"])


def _tone(freq: float, seconds: float, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    wave = np.sin(2 * np.pi * freq * t + rng.uniform(0, 2 * np.pi))
    ramp = min(len(t) // 4, int(0.005 * RATE))  # 5 ms fades: no clicks at the edges
    if ramp:
        env = np.ones(len(t))
        env[:ramp] = np.linspace(0, 1, ramp)
        env[-ramp:] = np.linspace(1, 0, ramp)
        wave *= env
    return wave


def beeps_clip(count: int, rng: np.random.Generator, seconds: float | None = None) -> np.ndarray:
    """float32 samples at 16 kHz: `count` beeps, spread at random over the clip."""
    if not 1 <= count <= MAX_BEEPS:
        raise ValueError(f"count must be 1-{MAX_BEEPS}")
    seconds = seconds or float(rng.uniform(1.5, 3.0))
    clip = rng.normal(0, 0.005, int(seconds * RATE))
    lengths = rng.uniform(0.06, 0.15, count)
    gaps = rng.uniform(0.08, 0.25, count - 1)
    span = lengths.sum() + gaps.sum()
    at = rng.uniform(0.02, max(0.03, seconds - span - 0.02))
    freq = rng.uniform(500, 1500)
    level = rng.uniform(0.2, 0.8)
    for i in range(count):
        start = int(at * RATE)
        b = _tone(freq, float(lengths[i]), rng) * level
        clip[start : start + len(b)] += b[: len(clip) - start]
        at += lengths[i] + (gaps[i] if i < count - 1 else 0)
    return np.clip(clip, -1, 1).astype(np.float32)


def pitch_clip(band: str, rng: np.random.Generator, seconds: float | None = None) -> np.ndarray:
    """float32 samples at 16 kHz: one steady tone in `band`, with a little noise."""
    lo, hi = BANDS[band]
    seconds = seconds or float(rng.uniform(0.5, 2.0))
    tone = _tone(float(rng.uniform(lo, hi)), seconds, rng) * rng.uniform(0.2, 0.8)
    return np.clip(tone + rng.normal(0, 0.005, len(tone)), -1, 1).astype(np.float32)


def sample(rng: np.random.Generator) -> tuple[str, str, np.ndarray, str]:
    """(task, question, clip, answer)."""
    if rng.random() < 0.6:
        n = int(rng.integers(1, MAX_BEEPS + 1))
        return "beeps", str(rng.choice(QUESTIONS["beeps"])), beeps_clip(n, rng), str(n)
    band = str(rng.choice(list(BANDS)))
    return "pitch", str(rng.choice(QUESTIONS["pitch"])), pitch_clip(band, rng), band


def audio_module() -> Any:
    """deploy/triton/models/sy-tiny/1/audio_tower.py: the one definition of the encoder's forward."""
    path = (
        Path(__file__).resolve().parents[3]
        / "deploy"
        / "triton"
        / "models"
        / "sy-tiny"
        / "1"
        / "audio_tower.py"
    )
    spec = importlib.util.spec_from_file_location("sy_audio_tower", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def audio_tensors(cfg: dict[str, Any], text_hidden: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded initial weights of the encoder and projector."""
    import torch

    g = torch.Generator().manual_seed(seed)
    d, inter, mels = int(cfg["hidden_size"]), int(cfg["intermediate_size"]), int(cfg["n_mels"])

    def w(*shape: int, fan_in: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) / fan_in**0.5

    return {
        "audio.conv1.weight": w(d, mels, 3, fan_in=mels * 3),
        "audio.conv1.bias": torch.zeros(d),
        "audio.conv2.weight": w(d, d, 3, fan_in=d * 3),
        "audio.conv2.bias": torch.zeros(d),
        "audio.attn_norm.weight": torch.ones(d),
        "audio.attn_norm.bias": torch.zeros(d),
        "audio.sink": w(1, d, fan_in=d),
        "audio.qkv.weight": w(3 * d, d, fan_in=d),
        "audio.qkv.bias": torch.zeros(3 * d),
        "audio.out.weight": w(d, d, fan_in=d),
        "audio.out.bias": torch.zeros(d),
        "audio.mlp_norm.weight": torch.ones(d),
        "audio.mlp_norm.bias": torch.zeros(d),
        "audio.fc1.weight": w(inter, d, fan_in=d),
        "audio.fc1.bias": torch.zeros(inter),
        "audio.fc2.weight": w(d, inter, fan_in=inter),
        "audio.fc2.bias": torch.zeros(d),
        "audio.post_norm.weight": torch.ones(d),
        "audio.post_norm.bias": torch.zeros(d),
        "audio_projector.linear_1.weight": w(text_hidden, d, fan_in=d),
        "audio_projector.linear_1.bias": torch.zeros(text_hidden),
        "audio_projector.linear_2.weight": w(text_hidden, text_hidden, fan_in=text_hidden),
        "audio_projector.linear_2.bias": torch.zeros(text_hidden),
    }


def _ids(tok: Any, question: str, answer: str) -> tuple[list[int], list[int]]:
    """(prompt ids without the audio span, answer ids + eos) in the chat template."""
    from shared.devstack.models.tokenizer import render

    msgs = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    prompt = tok.encode(render(msgs[:1], add_generation_prompt=True)).ids
    full = tok.encode(render(msgs)).ids
    return prompt, full[len(prompt) :]


def _embeds(
    lm: Any, w: dict[str, torch.Tensor], tower: Any, prompt: list[int], clip: np.ndarray, cfg: dict[str, Any]
) -> torch.Tensor:
    """[1, t, hidden]: BOS, the clip's embeddings, the rest of the prompt (the worker's layout)."""
    import torch

    embed = lm.get_input_embeddings()
    audio = tower.encode(w, torch.from_numpy(clip), cfg)
    ids = torch.tensor(prompt)
    return torch.cat([embed(ids[:1]), audio, embed(ids[1:])], dim=0)[None]


def train_audio(
    base_dir: Path, tensors: dict[str, torch.Tensor], cfg: dict[str, Any] = AUDIO, eval_per_task: int = 30
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train the encoder + projector against the frozen decoder; the weights and a report."""
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    torch.manual_seed(AUDIO_TRAIN["seed"])
    rng = np.random.default_rng(AUDIO_TRAIN["seed"])
    lm = LlamaForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32).eval()
    for p in lm.parameters():
        p.requires_grad_(False)
    tok = Tokenizer.from_file(str(base_dir / "tokenizer.json"))
    tower = audio_module()
    params = {k: torch.nn.Parameter(v.clone()) for k, v in tensors.items()}
    opt = torch.optim.AdamW(params.values(), lr=AUDIO_TRAIN["lr"], weight_decay=0.0)
    steps = int(AUDIO_TRAIN["steps"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, AUDIO_TRAIN["lr"], total_steps=steps, pct_start=0.1)
    t0, losses = time.monotonic(), []
    for _ in range(steps):
        rows, targets = [], []
        for _ in range(AUDIO_TRAIN["batch"]):
            _, question, clip, answer = sample(rng)
            prompt, ans = _ids(tok, question, answer)
            x = _embeds(lm, params, tower, prompt, clip, cfg)[0]
            a = lm.get_input_embeddings()(torch.tensor(ans))
            rows.append(torch.cat([x, a], dim=0))
            targets.append([-100] * len(x) + ans)  # aligned with the inputs: HF shifts inside
        width = max(len(r) for r in rows)
        x = torch.zeros(len(rows), width, rows[0].shape[-1])
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for j, (r, t) in enumerate(zip(rows, targets, strict=True)):
            x[j, : len(r)] = r
            labels[j, : len(t)] = torch.tensor(t)
            mask[j, : len(r)] = 1
        loss = lm(inputs_embeds=x, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    trained = {k: v.detach().clone() for k, v in params.items()}
    accuracy = evaluate_audio(lm, tok, trained, cfg, eval_per_task, seed=AUDIO_TRAIN["seed"] + 1000)
    report = {
        "audio_train_steps": steps,
        "audio_train_seconds": round(time.monotonic() - t0, 1),
        "audio_final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
        "eval_audio_accuracy": accuracy,
    }
    return trained, report


def evaluate_audio(
    lm: Any, tok: Any, w: dict[str, torch.Tensor], cfg: dict[str, Any], per_task: int, seed: int
) -> dict[str, float]:
    """Held-out clips (a seed training never used), greedy: right answers per task."""
    import torch

    rng = np.random.default_rng(seed)
    tower = audio_module()
    right: dict[str, int] = {"beeps": 0, "pitch": 0}
    total: dict[str, int] = {"beeps": 0, "pitch": 0}
    with torch.no_grad():
        while min(total.values()) < per_task:
            task, question, clip, answer = sample(rng)
            if total[task] >= per_task:
                continue
            prompt, _ = _ids(tok, question, answer)
            x = _embeds(lm, w, tower, prompt, clip, cfg)
            out = lm.generate(inputs_embeds=x, max_new_tokens=6, do_sample=False, pad_token_id=0)
            got = tok.decode(out[0].tolist(), skip_special_tokens=True).strip()
            right[task] += got == answer
            total[task] += 1
    return {t: round(right[t] / total[t], 3) for t in total}
