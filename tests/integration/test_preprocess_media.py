"""The preprocess service process with media parts, against the real embedded broker: accepted
requests reach sy.prepared carrying MediaRefs (blobs in the object store), refused ones are
answered on sy.responses with the reason, and leave no blob behind."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from switchyard.v1.envelope_pb2 import (
    ChatMessage,
    ContentPart,
    ImageUrl,
    InputAudio,
    Request,
    SamplingParams,
)

from shared.runtime.envelope import Envelope, Kind, decode, encode
from shared.runtime.storage import LocalStore
from tests.helpers import media_files as mf
from tests.helpers.kafka import collect, produce, service_env, services

POOLS = [
    {"name": "vllm", "engine": "vllm", "models": ["sy-tiny", "vl-test"]},
    {"name": "mm", "engine": "vllm", "models": ["vl-test"], "modalities": ["text", "image", "audio"]},
]


def chat(rid: str, model: str, *parts: ContentPart) -> Envelope:
    msg = ChatMessage(role="user", parts=[ContentPart(type="text", text="What is this?"), *parts])
    return Envelope(  # temperature 0: the cache could answer it, so it goes on to sy.prepared
        request_id=rid,
        tenant="acme",
        kind=Kind.KIND_CHAT,
        model=model,
        request=Request(messages=[msg], sampling=SamplingParams(temperature=0)),
    )


def png_part(data: bytes, mime: str = "image/png") -> ContentPart:
    return ContentPart(type="image_url", image_url=ImageUrl(url=mf.data_url(data, mime)))


async def test_media_requests_through_the_preprocess_service(broker, topics, var_dir: Path) -> None:
    model = var_dir / "models" / "vl-test"
    model.mkdir(parents=True)
    (model / "config.json").write_text(
        json.dumps({"model_type": "qwen2_vl", "text_config": {"max_position_embeddings": 4096}})
    )
    env = service_env(broker.bootstrap, topics, var_dir, SY_POOLS=json.dumps(POOLS))
    good = chat(
        "r-ok",
        "vl-test",
        png_part(mf.encode(mf.picture(640, 480), "PNG")),
        ContentPart(
            type="input_audio", input_audio=InputAudio(data=mf.b64(mf.audio("flac", 1.0)), format="flac")
        ),
    )
    bomb = chat("r-bomb", "vl-test", png_part(mf.png_bomb()))
    no_pool = chat("r-nopool", "sy-tiny", png_part(mf.encode(mf.picture(32, 32), "PNG")))
    with services(["preprocess"], env, var_dir):
        await produce(broker.bootstrap, f"{topics}requests", [encode(e) for e in (good, bomb, no_pool)])
        prepared, answered = await asyncio.gather(
            collect(broker.bootstrap, f"{topics}prepared", 1),
            collect(broker.bootstrap, f"{topics}responses", 2),
        )
    assert [decode(r.value).request_id for r in prepared] == ["r-ok"]
    out = decode(prepared[0].value)
    assert [m.modality for m in out.media] == ["image", "audio"]
    assert (out.media[0].width, out.media[0].height) == (640, 480) and out.media[0].mime == "image/jpeg"
    assert out.tokens.image == 17 * 23 + 2  # smart_resize: 480x640 -> 476x644, 28-pixel cells
    assert out.tokens.audio == 25
    media_timing = next(t for t in out.timings if t.stage == "media")
    assert media_timing.attrs["image_tokens"] == str(out.tokens.image)
    assert len(prepared[0].value) < 4096  # references travel, not the pixels
    errors = {decode(r.value).request_id: decode(r.value).error for r in answered}
    assert errors["r-bomb"].code == "media_too_large" and errors["r-bomb"].http_status == 413
    assert "50000x50000" in errors["r-bomb"].message and errors["r-bomb"].stage == "preprocess"
    assert errors["r-nopool"].code == "no_pool" and errors["r-nopool"].http_status == 404
    keys = sorted(i.key for i in await LocalStore(var_dir / "objects").list(""))
    assert keys == sorted(m.uri.removeprefix("s3://switchyard/") for m in out.media)


async def test_claim_check_against_s3(tmp_path: Path) -> None:
    """The same stage on the S3 code path (moto's S3 server): blobs, references, nothing on refusal."""
    from moto.server import ThreadedMotoServer

    from services.preprocess.media_stage import MediaStage
    from shared.runtime.config import Settings
    from shared.runtime.envelope import Rejected
    from shared.runtime.procs import free_port
    from shared.runtime.storage import S3Store

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        s = Settings(
            var_dir=tmp_path,
            s3_endpoint=f"127.0.0.1:{port}",
            s3_bucket="sy-media",
            pools=[{"name": "mm", "engine": "vllm", "models": ["vl-test"], "modalities": ["text", "image"]}],
        )  # type: ignore[arg-type]
        store = S3Store(s.s3_endpoint or "", s.s3_bucket, "testing", "testing", region="us-east-1")
        await store.put("uploads/acme/a.png", mf.encode(mf.picture(90, 60), "PNG"), content_type="image/png")
        stage = MediaStage(s, store)
        env = chat(
            "r1",
            "vl-test",
            ContentPart(type="image_url", image_url=ImageUrl(url="s3://sy-media/uploads/acme/a.png")),
        )
        found = await stage.analyse(env)
        stage.check_context(env, found, 5)
        await stage.commit(env, found)
        ref = env.media[0]
        assert ref.uri.startswith("s3://sy-media/media/") and (ref.width, ref.height) == (90, 60)
        info = await store.stat(ref.uri.removeprefix("s3://sy-media/"))
        assert info is not None and info.sha256 == ref.sha256 and info.content_type == "image/jpeg"
        png = mf.encode(mf.picture(50, 50), "PNG")
        bad = chat("r2", "vl-test", png_part(png), png_part(png[:-30]))
        with pytest.raises(Rejected):
            await stage.analyse(bad)
        assert [i.key for i in await store.list("media/")] == [info.key]
    finally:
        server.stop()
