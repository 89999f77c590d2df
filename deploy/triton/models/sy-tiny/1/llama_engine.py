"""A Llama-architecture decoder with its own continuous batching, in plain torch (CPU).

Why not transformers here: the Triton python model runs in the server's own environment
(numpy<2) and needs per-sequence KV caches that sequences join and leave between steps,
which `generate()` does not offer. This file has no Triton import, so the main test suite
checks it against transformers' LlamaForCausalLM token for token.

Reads a `save_pretrained` directory: config.json, model.safetensors, tokenizer.json,
generation_config.json (optional).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


class LlamaWeights:
    """The decoder's weights and the forward pass over a slot-indexed KV cache."""

    def __init__(self, model_dir: Path, dtype: torch.dtype = torch.float32) -> None:
        cfg = json.loads((model_dir / "config.json").read_text())
        cfg = cfg.get("text_config") or cfg  # a VLM's decoder (sy-vlm) is its text_config
        self.cfg = cfg
        self.dtype = dtype
        self.hidden = int(cfg["hidden_size"])
        self.n_layers = int(cfg["num_hidden_layers"])
        self.n_heads = int(cfg["num_attention_heads"])
        self.n_kv = int(cfg.get("num_key_value_heads") or self.n_heads)
        self.head_dim = int(cfg.get("head_dim") or self.hidden // self.n_heads)
        self.eps = float(cfg.get("rms_norm_eps", 1e-5))
        self.max_len = int(cfg.get("max_position_embeddings", 2048))
        rope = cfg.get("rope_parameters") or {}
        theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors in {model_dir}")
        w: dict[str, torch.Tensor] = {}
        for f in files:
            w.update(load_file(str(f)))
        self.w = {k: v.to(dtype) for k, v in w.items()}
        if "lm_head.weight" not in self.w:  # tied embeddings
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        inv = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        pos = torch.arange(self.max_len, dtype=torch.float32)
        freqs = torch.outer(pos, inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)
        self.eos_ids = _eos_ids(model_dir, cfg)

    def new_cache(self, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (self.n_layers, slots, self.n_kv, self.max_len, self.head_dim)
        return torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * xf.to(x.dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,  # [b, t] token ids
        positions: torch.Tensor,  # [b, t] positions
        slots: torch.Tensor,  # [b] cache slot of each row
        kv_len: int,  # keys to attend over: max(position)+1
        cache: tuple[torch.Tensor, torch.Tensor],
        valid: torch.Tensor | None = None,  # [b, t] False for padding
        embeds: torch.Tensor | None = None,  # [b, t, hidden]: instead of the tokens' (images)
    ) -> torch.Tensor:
        """Logits of the last position of each row ([b, vocab]); writes the new keys/values."""
        ck, cv = cache
        b, t = tokens.shape
        x = embeds if embeds is not None else F.embedding(tokens, self.w["model.embed_tokens.weight"])
        cos = self.cos[positions].unsqueeze(1)  # [b,1,t,d]
        sin = self.sin[positions].unsqueeze(1)
        key_pos = torch.arange(kv_len)
        # Row i, query j attends to keys at positions <= positions[i, j].
        mask = key_pos.view(1, 1, 1, kv_len) <= positions.view(b, 1, t, 1)
        rep = self.n_heads // self.n_kv
        slot_idx = slots.view(b, 1).expand(b, t)
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            h = self._norm(x, self.w[p + "input_layernorm.weight"])
            q = (h @ self.w[p + "self_attn.q_proj.weight"].T).view(b, t, self.n_heads, self.head_dim)
            k = (h @ self.w[p + "self_attn.k_proj.weight"].T).view(b, t, self.n_kv, self.head_dim)
            v = (h @ self.w[p + "self_attn.v_proj.weight"].T).view(b, t, self.n_kv, self.head_dim)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [b,h,t,d]
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            kk, vv = k.transpose(1, 2), v.transpose(1, 2)  # [b,t,h,d]
            if valid is not None:
                sel = valid
                ck[i][slot_idx[sel], :, positions[sel]] = kk[sel]
                cv[i][slot_idx[sel], :, positions[sel]] = vv[sel]
            else:
                ck[i][slot_idx, :, positions] = kk
                cv[i][slot_idx, :, positions] = vv
            keys = ck[i][slots, :, :kv_len]  # [b,h,kv,d]
            vals = cv[i][slots, :, :kv_len]
            if rep > 1:
                keys = keys.repeat_interleave(rep, dim=1)
                vals = vals.repeat_interleave(rep, dim=1)
            att = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask)
            att = att.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)
            x = x + att @ self.w[p + "self_attn.o_proj.weight"].T
            h = self._norm(x, self.w[p + "post_attention_layernorm.weight"])
            gate = h @ self.w[p + "mlp.gate_proj.weight"].T
            up = h @ self.w[p + "mlp.up_proj.weight"].T
            x = x + (F.silu(gate) * up) @ self.w[p + "mlp.down_proj.weight"].T
        if valid is not None:
            last = valid.long().sum(1) - 1
            x = x[torch.arange(b), last]
        else:
            x = x[:, -1]
        x = self._norm(x, self.w["model.norm.weight"])
        return (x @ self.w["lm_head.weight"].T).float()


def _eos_ids(model_dir: Path, cfg: dict[str, Any]) -> set[int]:
    ids: set[int] = set()
    sources = [cfg]
    gen = model_dir / "generation_config.json"
    if gen.is_file():
        sources.append(json.loads(gen.read_text()))
    for src in sources:
        e = src.get("eos_token_id")
        if isinstance(e, int):
            ids.add(e)
        elif isinstance(e, list):
            ids.update(int(x) for x in e)
    return ids


@dataclass
class GenRequest:
    """One generation: prompt ids and OpenAI-style sampling; `emit` gets each step's output."""

    prompt_ids: list[int]
    max_tokens: int
    emit: Callable[[GenStep], None]
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_tokens: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: int = -1  # -1: none; k >= 0: each sampled token's logprob and the k most likely
    images: Any = None  # [n, S, S, 3] uint8 (a VLM's engine only); their embeddings start at
    image_offsets: list[int] = field(default_factory=list)  # these prompt positions
    audio: list[Any] = field(default_factory=list)  # 1-D float32 clips at 16 kHz (an audio model's
    audio_offsets: list[int] = field(default_factory=list)  # engine only), embeddings from here
    cancelled: Callable[[], bool] = lambda: False
    queued_ns: int = field(default_factory=time.monotonic_ns)


@dataclass
class GenStep:
    token_ids: list[int]
    text: str
    finish_reason: str  # "" while running; stop | length | abort | error
    prompt_tokens: int
    queue_us: int  # time from submission to the first scheduled step
    # With GenRequest.logprobs >= 0, per token in token_ids: its logprob under the model's raw
    # distribution (before temperature/top-k/top-p, as vLLM reports by default) and the top k.
    logprobs: list[float] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)
    top_logprobs: list[list[float]] = field(default_factory=list)


@dataclass
class _Seq:
    req: GenRequest
    slot: int
    pos: int  # tokens already in the cache
    last: int  # token to feed next
    out_ids: list[int] = field(default_factory=list)
    text_sent: int = 0
    gen: torch.Generator | None = None
    queue_us: int = 0


class Engine:
    """Continuous batching: each loop admits waiting requests (prefill), then decodes one token
    for every running sequence in one batched forward pass. Runs on its own thread."""

    def __init__(self, model_dir: Path, max_batch: int = 16, dtype: torch.dtype = torch.float32) -> None:
        from tokenizers import Tokenizer

        self.model = LlamaWeights(model_dir, dtype)
        self.vision = None
        if (model_dir / "vision.safetensors").is_file():
            from vision_tower import VisionTower

            self.vision = VisionTower(model_dir, dtype)
        self.audio = None
        if (model_dir / "audio.safetensors").is_file():
            from audio_tower import AudioTower

            self.audio = AudioTower(model_dir, dtype)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.max_batch = max_batch
        self.cache = self.model.new_cache(max_batch)
        self.free = list(range(max_batch))
        self.waiting: deque[GenRequest] = deque()
        self.running: list[_Seq] = []
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.steps = 0

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="llama-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def submit(self, req: GenRequest) -> None:
        room = self.model.max_len - len(req.prompt_ids)
        if not req.prompt_ids or room <= 0:
            raise ValueError(f"prompt is {len(req.prompt_ids)} tokens; the context is {self.model.max_len}")
        if req.images is not None:
            if self.vision is None:
                raise ValueError("this model takes no images")
            n, span = len(req.images), self.vision.tokens_per_image
            if len(req.image_offsets) != n:
                raise ValueError(f"{n} images but {len(req.image_offsets)} offsets")
            for off in req.image_offsets:
                if off < 0 or off + span > len(req.prompt_ids):
                    raise ValueError(f"image at {off} (+{span} tokens) is outside the prompt")
        if req.audio:
            if self.audio is None:
                raise ValueError("this model takes no audio")
            if len(req.audio_offsets) != len(req.audio):
                raise ValueError(f"{len(req.audio)} audio clips but {len(req.audio_offsets)} offsets")
            for clip, off in zip(req.audio, req.audio_offsets, strict=True):
                span = self.audio.tokens_for(len(clip))
                if len(clip) == 0 or off < 0 or off + span > len(req.prompt_ids):
                    raise ValueError(f"audio at {off} (+{span} tokens) is outside the prompt")
        req.max_tokens = max(1, min(req.max_tokens, room))
        with self._cv:
            self.waiting.append(req)
            self._cv.notify()

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    @property
    def load(self) -> tuple[int, int]:
        """(running, waiting)."""
        return len(self.running), len(self.waiting)

    # ------------------------------------------------------------------ loop
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self.waiting and not self.running:
                    self._cv.wait()
                if self._stop:
                    return
                admitted = []
                while self.waiting and len(admitted) < len(self.free):
                    admitted.append(self.waiting.popleft())
            try:
                while admitted:
                    self._prefill(admitted[0])
                    admitted.pop(0)
                if self.running:
                    self._decode()
            except Exception as exc:  # noqa: BLE001 - fail this batch, keep the server alive
                for req in admitted:  # admitted but not started: answer them too
                    try:
                        req.emit(GenStep([], str(exc), "error", len(req.prompt_ids), 0))
                    except Exception:  # noqa: BLE001
                        pass
                for s in list(self.running):
                    self._finish(s, "error", error=str(exc))

    def _prefill(self, req: GenRequest) -> None:
        slot = self.free.pop()
        seq = _Seq(req, slot, pos=0, last=0)
        seq.queue_us = (time.monotonic_ns() - req.queued_ns) // 1000
        if req.seed is not None and req.temperature > 0:
            seq.gen = torch.Generator().manual_seed(int(req.seed))
        ids = torch.tensor([req.prompt_ids])
        positions = torch.arange(len(req.prompt_ids)).unsqueeze(0)
        try:
            embeds = self._media_embeds(req, ids)
            logits = self.model.forward(
                ids, positions, torch.tensor([slot]), len(req.prompt_ids), self.cache, embeds=embeds
            )
        except Exception:
            self.free.append(slot)
            raise
        seq.pos = len(req.prompt_ids)
        self.running.append(seq)
        self._advance([seq], logits)

    def _media_embeds(self, req: GenRequest, ids: torch.Tensor) -> torch.Tensor | None:
        """The prompt's embeddings with each image's patch embeddings and each clip's audio
        embeddings at their offsets (LLaVA, Qwen2-Audio); None for a text-only prompt."""
        images = req.images is not None and self.vision is not None
        audio = bool(req.audio) and self.audio is not None
        if not images and not audio:
            return None
        x = F.embedding(ids, self.model.w["model.embed_tokens.weight"]).clone()
        if images:
            img = self.vision.embed(torch.as_tensor(req.images)).to(x.dtype)
            span = self.vision.tokens_per_image
            for i, off in enumerate(req.image_offsets):
                x[0, off : off + span] = img[i]
        if audio:
            for clip, off in zip(req.audio, req.audio_offsets, strict=True):
                emb = self.audio.embed(torch.as_tensor(clip, dtype=torch.float32)).to(x.dtype)
                x[0, off : off + len(emb)] = emb
        return x

    def _decode(self) -> None:
        seqs = list(self.running)
        tokens = torch.tensor([[s.last] for s in seqs])
        positions = torch.tensor([[s.pos] for s in seqs])
        slots = torch.tensor([s.slot for s in seqs])
        kv_len = max(s.pos for s in seqs) + 1
        logits = self.model.forward(tokens, positions, slots, kv_len, self.cache)
        for s in seqs:
            s.pos += 1
        self.steps += 1
        self._advance(seqs, logits)

    def _advance(self, seqs: list[_Seq], logits: torch.Tensor) -> None:
        for i, s in enumerate(seqs):
            if s.req.cancelled():
                self._finish(s, "abort")
                continue
            tok = self._sample(s, logits[i])
            finish = ""
            if tok in self.model.eos_ids:
                finish = "stop"
                new_ids: list[int] = []
            else:
                s.out_ids.append(tok)
                new_ids = [tok]
            text = self.tokenizer.decode(s.out_ids, skip_special_tokens=True)
            if not finish:
                for stop in s.req.stop:
                    at = text.find(stop, max(0, s.text_sent - len(stop)))
                    if stop and at >= 0:
                        text, finish = text[:at], "stop"
                        break
            if not finish and (len(s.out_ids) >= s.req.max_tokens or s.pos + 1 >= self.model.max_len):
                finish = "length"
            # Hold back a trailing partial UTF-8 character until the next token completes it.
            visible = text if finish else text.rstrip("\ufffd")
            delta = visible[s.text_sent :] if len(visible) > s.text_sent else ""
            s.text_sent = max(s.text_sent, len(visible))
            s.last = tok
            step = GenStep(new_ids, delta, finish, len(s.req.prompt_ids), s.queue_us)
            if s.req.logprobs >= 0 and new_ids:
                lp = torch.log_softmax(logits[i].float(), dim=-1)
                step.logprobs = [float(lp[tok])]
                if s.req.logprobs > 0:
                    top = torch.topk(lp, min(s.req.logprobs, lp.numel()))
                    step.top_ids = [[int(x) for x in top.indices]]
                    step.top_logprobs = [[float(x) for x in top.values]]
                else:
                    step.top_ids, step.top_logprobs = [[]], [[]]
            self._emit(s, step)
            if finish:
                self._release(s)

    def _sample(self, s: _Seq, logits: torch.Tensor) -> int:
        r = s.req
        if len(s.out_ids) < r.min_tokens and self.model.eos_ids:
            logits = logits.clone()
            logits[list(self.model.eos_ids)] = -math.inf
        if r.temperature <= 0:
            return int(torch.argmax(logits))
        logits = logits / r.temperature
        if r.top_k and r.top_k > 0:
            kth = torch.topk(logits, min(r.top_k, logits.numel())).values[-1]
            logits = logits.masked_fill(logits < kth, -math.inf)
        probs = torch.softmax(logits, dim=-1)
        if 0 < r.top_p < 1:
            sp, si = torch.sort(probs, descending=True)
            keep = torch.cumsum(sp, 0) - sp < r.top_p
            sp = sp * keep
            probs = torch.zeros_like(probs).scatter(0, si, sp)
            probs = probs / probs.sum()
        return int(torch.multinomial(probs, 1, generator=s.gen))

    def _emit(self, s: _Seq, step: GenStep) -> None:
        try:
            s.req.emit(step)
        except Exception:  # noqa: BLE001 - a closed stream must not stop the others
            if not step.finish_reason:
                self._finish(s, "abort")

    def _finish(self, s: _Seq, reason: str, error: str = "") -> None:
        try:
            s.req.emit(GenStep([], error, reason, len(s.req.prompt_ids), s.queue_us))
        except Exception:  # noqa: BLE001
            pass
        self._release(s)

    def _release(self, s: _Seq) -> None:
        if s in self.running:
            self.running.remove(s)
            self.free.append(s.slot)
