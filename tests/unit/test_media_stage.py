"""MediaStage against a real local object store: claim check, token totals, context and pool
checks, remote/object URLs, and no blob left behind by any refusal."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from switchyard.v1.envelope_pb2 import ChatMessage, ContentPart, ImageUrl, InputAudio, MediaRef, Request

from services.cache.keys import cache_key
from services.preprocess.media_stage import MediaStage
from services.router.policy import choose_pool
from shared.prepare import Preprocessor, TokenCounter
from shared.runtime.config import PoolConfig, Settings
from shared.runtime.envelope import Envelope, Kind, Rejected
from shared.runtime.storage import LocalStore
from tests.helpers import media_files as mf

MM_POOLS = [
    PoolConfig(name="vllm", engine="vllm", models=["sy-tiny", "vl-test"], max_lora_rank=8),
    PoolConfig(name="mm", engine="triton", models=["vl-test"], modalities=["text", "image", "audio"]),
]


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """A model dir naming the Qwen2-VL family (config only: preprocess reads no weights)."""
    d = tmp_path / "models" / "vl-test"
    d.mkdir(parents=True)
    (d / "config.json").write_text(
        json.dumps({"model_type": "qwen2_vl", "text_config": {"max_position_embeddings": 4096}})
    )
    (d / "preprocessor_config.json").write_text(json.dumps({"min_pixels": 3136, "max_pixels": 401408}))
    return tmp_path / "models"


def settings(models: Path, tmp: Path, **kw: object) -> Settings:
    base: dict[str, object] = dict(
        models_dir=models, storage_dir=tmp / "objects", var_dir=tmp / "var", pools=MM_POOLS
    )
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def request(*parts: ContentPart, model: str = "vl-test", text: str = "What is in this picture?") -> Envelope:
    msg = ChatMessage(role="user", parts=[ContentPart(type="text", text=text), *parts])
    return Envelope(
        request_id="r1", tenant="acme", kind=Kind.KIND_CHAT, model=model, request=Request(messages=[msg])
    )


def image(data: bytes, mime: str = "image/png") -> ContentPart:
    return ContentPart(type="image_url", image_url=ImageUrl(url=mf.data_url(data, mime)))


def audio(data: bytes, fmt: str) -> ContentPart:
    return ContentPart(type="input_audio", input_audio=InputAudio(data=mf.b64(data), format=fmt))


async def run(stage: MediaStage, env: Envelope) -> Envelope:
    found = await stage.analyse(env)
    stage.check_context(env, found, 10)
    await stage.commit(env, found)
    return env


async def blobs(store: LocalStore) -> list[str]:
    return [i.key for i in await store.list("")]


async def test_image_and_audio_become_media_refs_with_stored_normalised_blobs(
    models: Path, tmp_path: Path
) -> None:
    s = settings(models, tmp_path)
    store = LocalStore(s.object_dir)
    stage = MediaStage(s, store)
    env = request(
        image(mf.encode(mf.picture(1600, 900), "JPEG"), "image/jpeg"), audio(mf.audio("mp3", 2.0), "mp3")
    )
    await run(stage, env)
    img, aud = env.media
    assert (
        img.modality == "image" and img.mime == "image/jpeg" and (img.message_index, img.part_index) == (0, 1)
    )
    assert img.width * img.height <= 401408 and abs(img.width / img.height - 16 / 9) < 0.01
    assert aud.modality == "audio" and aud.mime == "audio/wav" and abs(aud.duration_s - 2.0) < 0.06
    for ref in env.media:  # content-addressed claim check: the uri's bytes hash to the ref's sha256
        key = ref.uri.removeprefix("s3://switchyard/")
        assert key == f"media/{ref.sha256[:2]}/{ref.sha256}.{'jpg' if ref.modality == 'image' else 'wav'}"
        data = await store.get(key)
        assert hashlib.sha256(data).hexdigest() == ref.sha256 and len(data) == ref.size_bytes
    parts = env.request.messages[0].parts
    assert parts[1].image_url.url == img.uri  # inline bytes replaced by the reference
    assert parts[2].input_audio.data == "" and parts[2].input_audio.format == "wav"
    assert env.tokens.image > 0 and env.tokens.audio == 50  # 2 s x 25 tokens/s
    assert env.tokens.image == stage.model("vl-test").vision.image_tokens(img.width, img.height)
    t = next(t for t in env.timings if t.stage == "media")
    assert (
        t.attrs["images"] == "1"
        and t.attrs["audio"] == "1"
        and t.attrs["image_tokens"] == str(env.tokens.image)
    )
    assert len(env.SerializeToString()) < 4096  # the record carries references, not media


async def test_totals_include_text_tokens_from_the_models_tokenizer(tmp_path: Path) -> None:
    built = Path(__file__).resolve().parents[2] / "var" / "models"  # `make test` builds it first
    models = built if (built / "sy-tiny").is_dir() else None
    s = Settings(
        storage_dir=tmp_path / "o",
        var_dir=tmp_path,
        pools=[PoolConfig(name="mm", engine="vllm", models=["sy-tiny"], modalities=["text", "image"])],
        **({"models_dir": models} if models else {}),
    )
    if not (s.model_dir / "sy-tiny" / "tokenizer.json").is_file():
        pytest.skip("sy-tiny is not built (switchyard models build)")
    stage = MediaStage(s, LocalStore(s.object_dir))
    env = request(image(mf.encode(mf.picture(100, 100), "PNG")), model="sy-tiny")
    found = await stage.analyse(env)
    Preprocessor(TokenCounter(s.model_dir)).prepare(env, media_checked=True)
    assert env.tokens.prompt_text > 0 and env.tokens.tokenizer == "sy-tiny"
    stage.check_context(env, found, env.tokens.prompt_text)
    await stage.commit(env, found)
    assert env.tokens.image == (112 // 28) ** 2 + 2  # 100x100 -> smart_resize 112x112 (default family)
    assert env.tokens.total == env.tokens.prompt_text + env.tokens.image


async def test_same_picture_is_stored_once(models: Path, tmp_path: Path) -> None:
    s = settings(models, tmp_path)
    store = LocalStore(s.object_dir)
    stage = MediaStage(s, store)
    pic = mf.picture(64, 64)
    a = await run(stage, request(image(mf.encode(pic, "PNG"))))
    b = await run(stage, request(image(mf.encode(pic, "WEBP", lossless=True), "image/webp")))
    assert a.media[0].sha256 == b.media[0].sha256
    assert len(await blobs(store)) == 1


async def test_refusals_leave_no_blob_behind(models: Path, tmp_path: Path) -> None:
    s = settings(models, tmp_path, media_max_images=2, media_audio_max_seconds=1.0)
    store = LocalStore(s.object_dir)
    stage = MediaStage(s, store)
    good = image(mf.encode(mf.picture(64, 64), "PNG"))
    png = mf.encode(mf.picture(64, 64), "PNG")
    cases = {
        "invalid_image": request(good, image(png[: len(png) // 2])),
        "media_type_mismatch": request(good, image(mf.encode(mf.picture(8, 8), "JPEG"), "image/png")),
        "media_too_large": request(good, image(mf.png_bomb(), "image/png")),
        "too_many_media": request(good, good, good),
        "unsupported_media": request(good, audio(mf.mp4_box(), "m4a")),
    }
    for code, env in cases.items():
        with pytest.raises(Rejected) as e:
            await run(stage, env)
        assert e.value.code == code, (code, e.value.reason)
        if code != "too_many_media":  # per request; the others name the part
            assert e.value.reason.startswith("request.messages[0].parts[2]: "), e.value.reason
    with pytest.raises(Rejected) as e:
        await run(stage, request(good, audio(mf.audio("wav", 1.5, 16000, 1), "wav")))
    assert e.value.code == "media_too_large" and "over the limit of 1 s" in e.value.reason
    assert await blobs(store) == []


async def test_prompt_over_the_context_is_refused_before_anything_is_stored(
    models: Path, tmp_path: Path
) -> None:
    (models / "vl-test" / "config.json").write_text(
        json.dumps({"model_type": "qwen2_vl", "text_config": {"max_position_embeddings": 300}})
    )
    s = settings(models, tmp_path / "ctx")
    store = LocalStore(s.object_dir)
    stage = MediaStage(s, store)
    env = request(image(mf.encode(mf.picture(1000, 1000), "PNG")))
    found = await stage.analyse(env)
    with pytest.raises(Rejected) as e:
        stage.check_context(env, found, 12)
    assert e.value.code == "context_length_exceeded"
    assert f"12 text + {found.image_tokens} image" in e.value.reason and "context is 300" in e.value.reason
    assert await blobs(store) == []


async def test_a_failed_write_removes_the_blobs_this_request_created(models: Path, tmp_path: Path) -> None:
    s = settings(models, tmp_path)
    real = LocalStore(s.object_dir)

    class FailingSecondPut(LocalStore):  # the real store, with the second write failing
        puts = 0

        async def put(self, key, data, content_type="application/octet-stream"):  # type: ignore[no-untyped-def]
            FailingSecondPut.puts += 1
            if FailingSecondPut.puts == 2:
                raise OSError("disk full")
            return await super().put(key, data, content_type)

    stage = MediaStage(s, FailingSecondPut(s.object_dir))
    env = request(image(mf.encode(mf.picture(64, 64), "PNG")), image(mf.encode(mf.picture(32, 32), "PNG")))
    found = await stage.analyse(env)
    with pytest.raises(OSError):
        await stage.commit(env, found)
    assert await blobs(real) == [] and not env.media


async def test_media_for_a_model_no_pool_serves_with_that_modality_is_refused(
    models: Path, tmp_path: Path
) -> None:
    s = settings(models, tmp_path)
    stage = MediaStage(s, LocalStore(s.object_dir))
    with pytest.raises(Rejected) as e:
        await stage.analyse(request(image(mf.encode(mf.picture(8, 8), "PNG")), model="sy-tiny"))
    assert e.value.code == "no_pool" and e.value.http_status == 404 and "'image'" in e.value.reason
    assert await blobs(LocalStore(s.object_dir)) == []


def test_router_sends_media_only_to_pools_that_declare_the_modality() -> None:
    env = request(model="vl-test")
    env.media.append(MediaRef(modality="image", sha256="ab" * 32))
    assert choose_pool(env, MM_POOLS).pool.name == "mm"  # type: ignore[union-attr]
    text_only = [MM_POOLS[0]]
    d = choose_pool(env, text_only)
    assert d.pool is None and "accepts ['image', 'text']" in d.reason
    env.media.append(MediaRef(modality="audio", sha256="cd" * 32))
    no_audio = [
        MM_POOLS[0],
        PoolConfig(name="img", engine="vllm", models=["vl-test"], modalities=["text", "image"]),
    ]
    assert choose_pool(env, no_audio).pool is None
    assert choose_pool(request(model="vl-test"), MM_POOLS).pool.name == "vllm"  # type: ignore[union-attr]


async def test_same_text_with_another_image_never_shares_a_cache_key(models: Path, tmp_path: Path) -> None:
    s = settings(models, tmp_path)
    stage = MediaStage(s, LocalStore(s.object_dir))
    a = await run(stage, request(image(mf.encode(mf.picture(64, 64), "PNG"))))
    b = await run(stage, request(image(mf.encode(mf.picture(64, 65), "PNG"))))
    again = await run(stage, request(image(mf.encode(mf.picture(64, 64), "JPEG", quality=70), "image/jpeg")))
    ka, kb = cache_key(a), cache_key(b)
    assert ka.text == kb.text and ka.exact != kb.exact and ka.media_hash != kb.media_hash
    assert (
        cache_key(a).exact
        == cache_key(await run(stage, request(image(mf.encode(mf.picture(64, 64), "PNG"))))).exact
    )
    assert again.media[0].sha256 != a.media[0].sha256  # lossy JPEG: other pixels, another key
    # Two pictures swapped between the parts of one message is another request too.
    p, q = image(mf.encode(mf.picture(40, 40), "PNG")), image(mf.encode(mf.picture(50, 40), "PNG"))
    assert (
        cache_key(await run(stage, request(p, q))).exact != cache_key(await run(stage, request(q, p))).exact
    )


# ------------------------------------------------------------------------------ URLs


@pytest.fixture
def http_server() -> Iterator[tuple[str, dict[str, tuple[int, str, bytes, float]]]]:
    routes: dict[str, tuple[int, str, bytes, float]] = {}

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            status, ct, body, delay = routes.get(self.path, (404, "text/plain", b"nope", 0.0))
            self.send_response(status)
            self.send_header("Content-Type", ct)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if delay:
                threading.Event().wait(delay)
            try:
                self.wfile.write(body)
            except OSError:
                pass

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", routes
    srv.shutdown()


def url_part(url: str) -> ContentPart:
    return ContentPart(type="image_url", image_url=ImageUrl(url=url))


async def test_remote_urls_are_off_by_default_and_limited_when_on(
    models: Path, tmp_path: Path, http_server
) -> None:  # type: ignore[no-untyped-def]
    base, routes = http_server
    png = mf.encode(mf.picture(500, 400), "PNG")
    routes["/ok.png"] = (200, "image/png", png, 0.0)
    routes["/big.png"] = (200, "image/png", png + b"\x00" * 5000, 0.0)
    routes["/slow.png"] = (200, "image/png", png, 2.0)
    routes["/lies.png"] = (200, "image/png", mf.encode(mf.picture(8, 8), "JPEG"), 0.0)
    off = MediaStage(settings(models, tmp_path), LocalStore(tmp_path / "o1"))
    with pytest.raises(Rejected) as e:
        await off.analyse(request(url_part(f"{base}/ok.png")))
    assert "remote image URLs are disabled" in e.value.reason
    s = settings(models, tmp_path, media_remote_fetch=True, media_remote_timeout_s=0.5)
    strict = MediaStage(s, LocalStore(tmp_path / "o2"))
    with pytest.raises(Rejected) as e:
        await strict.analyse(request(url_part(f"{base}/ok.png")))
    assert "non-public address" in e.value.reason  # loopback is refused unless allowed
    s = settings(models, tmp_path, media_remote_fetch=True, media_remote_timeout_s=0.5,
                 media_remote_allow_private=True, media_image_max_bytes=len(png) + 100)  # fmt: skip
    on = MediaStage(s, LocalStore(tmp_path / "o3"))
    env = await run(on, request(url_part(f"{base}/ok.png")))
    assert env.media[0].width == 500 and env.request.messages[0].parts[1].image_url.url.startswith("s3://")
    for path, code in [("/big.png", "media_too_large"), ("/slow.png", "media_fetch_failed"),
                       ("/missing.png", "media_fetch_failed"), ("/lies.png", "media_type_mismatch")]:  # fmt: skip
        with pytest.raises(Rejected) as e:
            await on.analyse(request(url_part(base + path)))
        assert e.value.code == code, (path, e.value.reason)
    with pytest.raises(Rejected) as e:
        await on.analyse(request(url_part("ftp://example.org/x.png")))
    assert "scheme 'ftp'" in e.value.reason


async def test_object_store_uris_within_the_callers_prefixes(models: Path, tmp_path: Path) -> None:
    s = settings(models, tmp_path)
    store = LocalStore(s.object_dir)
    png = mf.encode(mf.picture(30, 20), "PNG")
    await store.put("uploads/acme/cat.png", png, content_type="image/png")
    await store.put("uploads/other/cat.png", png, content_type="image/png")
    await store.put("adapters/acme/x/1/adapter_config.json", b"{}")
    stage = MediaStage(s, store)
    env = await run(stage, request(url_part("s3://switchyard/uploads/acme/cat.png")))
    assert (env.media[0].width, env.media[0].height) == (30, 20)
    # the stored normalised blob can itself be referenced again (content address)
    again = await run(stage, request(url_part(env.media[0].uri)))
    assert again.media[0].sha256 == env.media[0].sha256
    for url, status in [("s3://switchyard/uploads/other/cat.png", 403), ("s3://switchyard/adapters/acme/x/1/adapter_config.json", 403),
                        ("s3://elsewhere/uploads/acme/cat.png", 403), ("s3://switchyard/uploads/acme/none.png", 404),
                        ("s3://switchyard/uploads/acme/../other/cat.png", 400)]:  # fmt: skip
        with pytest.raises(Rejected) as e:
            await stage.analyse(request(url_part(url)))
        assert e.value.code == "media_fetch_failed" and e.value.http_status == status, (url, e.value.reason)
