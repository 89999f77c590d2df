"""From an envelope to engine inputs, and from engine steps to deltas, a response and timings.

No Kafka and no engine here: `sampling_kwargs` and `prompt_token_ids` build what the engine
takes; `Accumulator` turns an engine's delta outputs (vLLM's DELTA RequestOutput, or an
`EngineStep` built by a worker whose engine is elsewhere, e.g. Triton) into StreamDelta records
and the final Response with TTFT/ITL. The GenerationWorker (worker.py) wires them to an engine
and the bus.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from switchyard.v1.envelope_pb2 import Choice, Response, TokenLogprob, TopLogprob, Usage
from switchyard.v1.events_pb2 import ChoiceDelta, StreamDelta

from shared.runtime.envelope import Envelope, ErrorCode, Kind, Rejected
from shared.runtime.telemetry import add_timing

FINISH_REASONS = {"stop", "length", "abort", "error"}


def seed_for(request_id: str) -> int:
    """A stable seed per request: a redelivered request regenerates the same text."""
    return int.from_bytes(hashlib.sha256(request_id.encode()).digest()[:4], "big")


def chat_messages(env: Envelope) -> list[dict[str, str]]:
    msgs = []
    for m in env.request.messages:
        text = m.content or "".join(p.text for p in m.parts if p.type == "text")
        msgs.append({"role": m.role, "content": text})
    return msgs


def prompt_token_ids(tokenizer: Any, env: Envelope) -> list[int]:
    """The model's own rendering: its chat template for chat, plain encoding for completions."""
    if env.kind == Kind.KIND_COMPLETION or (env.request.prompt and not env.request.messages):
        return list(tokenizer.encode(env.request.prompt))
    # Render, then encode without adding specials: the template already places them (as HF does).
    text = tokenizer.apply_chat_template(chat_messages(env), add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


# vLLM's extra fields carried as they are when set (unset: vLLM's default).
_VLLM_SCALARS = (
    "min_p",
    "ignore_eos",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
)
_VLLM_LISTS = ("stop_token_ids", "allowed_token_ids", "bad_words")
# Fields naming token ids: an id past the vocabulary is the client's error, not the engine's.
TOKEN_ID_FIELDS = ("stop_token_ids", "allowed_token_ids", "logit_bias")


def check_token_ids(kw: dict[str, Any], vocab_size: int) -> None:
    """Rejected (400) naming the field when a token id is outside the model's vocabulary: vLLM's
    engine would raise on it only after the request was accepted (retried, then dead-lettered)."""
    for name in TOKEN_ID_FIELDS:
        bad = sorted({int(t) for t in kw.get(name) or () if not 0 <= int(t) < vocab_size})
        if bad:
            raise Rejected(
                ErrorCode.INVALID_REQUEST,
                f"{name}: token id(s) {bad[:10]} are outside the model's vocabulary of {vocab_size} tokens",
            )


def sampling_kwargs(
    env: Envelope, prompt_len: int, max_model_len: int, vocab_size: int | None = None
) -> dict[str, Any]:
    """OpenAI/vLLM sampling semantics; unset fields take OpenAI's defaults. With `vocab_size`,
    token ids (stop_token_ids, allowed_token_ids, logit_bias) are checked against it."""
    s = env.request.sampling
    room = max_model_len - prompt_len
    if room <= 0:
        raise Rejected(
            "context_length_exceeded",
            f"prompt is {prompt_len} tokens; the model's context is {max_model_len}",
        )
    max_tokens = s.max_tokens if s.HasField("max_tokens") else room
    if max_tokens > room:
        raise Rejected(
            "context_length_exceeded",
            f"prompt ({prompt_len}) + max_tokens ({max_tokens}) exceeds the context of {max_model_len} tokens",
        )
    temperature = s.temperature if s.HasField("temperature") else 1.0
    kw: dict[str, Any] = {
        "n": s.n if s.HasField("n") else 1,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "seed": s.seed if s.HasField("seed") else (seed_for(env.request_id) if temperature > 0 else None),
    }
    if s.HasField("top_p"):
        kw["top_p"] = s.top_p
    if s.HasField("top_k"):
        kw["top_k"] = s.top_k
    if s.stop:
        kw["stop"] = list(s.stop)
    if s.HasField("presence_penalty"):
        kw["presence_penalty"] = s.presence_penalty
    if s.HasField("frequency_penalty"):
        kw["frequency_penalty"] = s.frequency_penalty
    if s.HasField("repetition_penalty"):
        kw["repetition_penalty"] = s.repetition_penalty
    if s.HasField("min_tokens"):
        if s.min_tokens > max_tokens:
            raise Rejected(
                ErrorCode.INVALID_REQUEST, f"min_tokens ({s.min_tokens}) exceeds max_tokens ({max_tokens})"
            )
        kw["min_tokens"] = s.min_tokens
    if s.logprobs:
        kw["logprobs"] = s.top_logprobs if s.HasField("top_logprobs") else 0
    for name in _VLLM_SCALARS:
        if s.HasField(name):
            kw[name] = getattr(s, name)
    for name in _VLLM_LISTS:
        if getattr(s, name):
            kw[name] = list(getattr(s, name))
    if s.logit_bias:
        kw["logit_bias"] = dict(s.logit_bias)
    if vocab_size is not None:
        check_token_ids(kw, vocab_size)
    return kw


@dataclass
class Logprob:
    """One token's logprob at a position (the fields of vLLM's `Logprob` that we read)."""

    logprob: float
    rank: int | None = None  # 1 = the most likely token
    decoded_token: str | None = None


@dataclass
class StepOutput:
    """One choice's new tokens in one engine step (the shape of vLLM's CompletionOutput)."""

    index: int
    token_ids: list[int]
    text: str
    finish_reason: str | None = None
    logprobs: list[dict[int, Any]] | None = None


@dataclass
class EngineStep:
    """One engine step (the shape of vLLM's RequestOutput with RequestOutputKind.DELTA)."""

    outputs: list[StepOutput]
    prompt_token_ids: list[int] | None = None
    metrics: Any = None
    queue_s: float | None = None  # time the request waited inside the engine, where it says


def spread(after_ns: int, at_ns: int, k: int) -> list[int]:
    """Times of k tokens that arrived together at `at_ns`, the last token before them at
    `after_ns`: evenly between the two. An engine that streams every few tokens (vLLM's
    --stream-interval, Triton's decoupled batches) hands over several at once; the ITL of the
    breakdown is then the mean interval within each chunk, not a zero followed by a long gap."""
    if k <= 1 or at_ns <= after_ns:
        return [at_ns] * k
    return [after_ns + (at_ns - after_ns) * (i + 1) // k for i in range(k)]


@dataclass
class _ChoiceState:
    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str = ""
    token_times: list[int] = field(default_factory=list)
    chars: int = 0


class Accumulator:
    """Collects one generation's DELTA outputs."""

    def __init__(
        self, n: int, worker: str, stage: str = "vllm_worker", top_logprobs: int | None = None
    ) -> None:
        self.choices = [_ChoiceState() for _ in range(n)]
        self.top_logprobs = top_logprobs  # None: logprobs not asked for; k: k alternatives each
        self.worker = worker
        self.stage = stage  # the worker's stage entry: parent of the engine sub-timings
        self.submitted_ns = time.time_ns()
        self.first_token_ns = 0
        self.last_token_ns = 0
        self.prompt_tokens = 0
        self.engine_queue_s: float | None = None
        self._first_delta = True

    def add(self, out: Any, request_id: str, tenant: str) -> StreamDelta | None:
        """Record one engine step; return the delta to stream (None when it carried no tokens)."""
        now = time.time_ns()
        if out.prompt_token_ids is not None:
            self.prompt_tokens = len(out.prompt_token_ids)
        delta = StreamDelta(request_id=request_id, tenant=tenant, worker=self.worker, sent_unix_ns=now)
        for o in out.outputs:
            st = self.choices[o.index]
            ids = list(o.token_ids or [])
            if ids:
                if not self.first_token_ns:
                    self.first_token_ns = now
                self.last_token_ns = now
                st.token_times.extend(spread(st.token_times[-1] if st.token_times else now, now, len(ids)))
            lps = self._token_logprobs(ids, o.logprobs) if o.logprobs else []
            if ids or o.text or o.finish_reason:
                delta.choices.append(
                    ChoiceDelta(
                        index=o.index,
                        text=o.text or "",
                        token_ids=ids,
                        token_offset=len(st.token_ids),
                        finish_reason=o.finish_reason or "",
                        text_offset=st.chars,
                        logprobs=lps if self.top_logprobs is not None else [],
                    )
                )
            st.text.append(o.text or "")
            st.chars += len(o.text or "")
            st.token_ids.extend(ids)
            st.logprobs.extend(t.logprob for t in lps)
            st.token_logprobs.extend(lps)
            if o.finish_reason:
                st.finish_reason = o.finish_reason if o.finish_reason in FINISH_REASONS else "stop"
        if getattr(out, "queue_s", None) is not None:
            self.engine_queue_s = out.queue_s
        m = getattr(out, "metrics", None)
        if m is not None and getattr(m, "scheduled_ts", 0) and getattr(m, "queued_ts", 0):
            self.engine_queue_s = max(0.0, m.scheduled_ts - m.queued_ts)
        if not delta.choices:
            return None
        delta.first = self._first_delta
        self._first_delta = False
        return delta

    def _token_logprobs(self, ids: list[int], per_token: list[dict[int, Any]]) -> list[TokenLogprob]:
        """vLLM's per-position dicts (sampled token + the top k by rank) as TokenLogprob records."""
        k = self.top_logprobs or 0
        out = []
        for tok, lp in zip(ids, per_token, strict=False):
            mine = lp.get(tok)
            top = sorted(
                ((t, x) for t, x in lp.items() if x.rank is not None and x.rank <= k),
                key=lambda e: e[1].rank,
            )
            out.append(
                TokenLogprob(
                    token_id=tok,
                    token=(mine.decoded_token or "") if mine is not None else "",
                    logprob=float(mine.logprob) if mine is not None else 0.0,
                    top=[
                        TopLogprob(token_id=t, token=x.decoded_token or "", logprob=float(x.logprob))
                        for t, x in top
                    ],
                )
            )
        return out

    def itl_ms(self) -> list[float]:
        times = self.choices[0].token_times
        return [round((b - a) / 1e6, 3) for a, b in zip(times, times[1:], strict=False) if b > a]

    def response(self, pool: str) -> Response:
        completion = sum(len(c.token_ids) for c in self.choices)
        return Response(
            choices=[
                Choice(
                    index=i,
                    text="".join(c.text),
                    finish_reason=c.finish_reason or "stop",
                    token_ids=c.token_ids,
                    logprobs=c.logprobs,
                    token_logprobs=c.token_logprobs if self.top_logprobs is not None else [],
                )
                for i, c in enumerate(self.choices)
            ],
            usage=Usage(
                prompt_tokens=self.prompt_tokens,
                completion_tokens=completion,
                total_tokens=self.prompt_tokens + completion,
            ),
            pool=pool,
            worker=self.worker,
        )

    def add_timings(self, env: Envelope, finished_ns: int) -> None:
        """Engine sub-timings (parent: the worker stage entry, so breakdowns do not count them twice)."""
        itl = self.itl_ms()
        attrs: dict[str, object] = {
            "parent": self.stage,
            "tokens": sum(len(c.token_ids) for c in self.choices),
        }
        if self.engine_queue_s is not None:
            attrs["engine_queue_ms"] = round(self.engine_queue_s * 1000, 3)
        first = self.first_token_ns or finished_ns
        add_timing(env, "ttft", self.submitted_ns, first, **attrs)
        summary: dict[str, object] = {"parent": self.stage}
        if itl:
            summary.update(
                itl_mean_ms=round(statistics.fmean(itl), 3),
                itl_p50_ms=round(statistics.median(itl), 3),
                itl_max_ms=max(itl),
                itl_ms=",".join(f"{x:g}" for x in itl),
            )
        add_timing(env, "decode", first, max(first, self.last_token_ns or first), **summary)


def merge_deltas(deltas: list[StreamDelta]) -> StreamDelta:
    """One record for several engine steps: fewer, larger records on sy.stream."""
    out = StreamDelta()
    out.CopyFrom(deltas[0])
    by_index = {c.index: c for c in out.choices}
    for d in deltas[1:]:
        for c in d.choices:
            if c.index in by_index:
                m = by_index[c.index]
                m.text += c.text
                m.token_ids.extend(c.token_ids)
                m.logprobs.extend(c.logprobs)
                m.finish_reason = c.finish_reason or m.finish_reason
            else:
                by_index[c.index] = out.choices.add()
                by_index[c.index].CopyFrom(c)
    out.sent_unix_ns = deltas[-1].sent_unix_ns
    return out


class DeltaBatcher:
    """The first delta goes at once (TTFT); later ones are coalesced for `flush_ms`.

    The embedded broker's fetch cost grows with the number of batches in a partition, and one
    record per token is the biggest source of them; on Kafka it simply saves requests.
    """

    def __init__(self, flush_ms: float) -> None:
        self.flush_ns = int(flush_ms * 1e6)
        self.pending: list[StreamDelta] = []
        self.last_flush = 0
        self.sent_any = False

    def add(self, delta: StreamDelta) -> StreamDelta | None:
        self.pending.append(delta)
        now = time.time_ns()
        if not self.sent_any or now - self.last_flush >= self.flush_ns:
            return self.flush()
        return None

    def flush(self) -> StreamDelta | None:
        if not self.pending:
            return None
        merged = merge_deltas(self.pending)
        self.pending = []
        self.last_flush = time.time_ns()
        self.sent_any = True
        return merged


def deadline_passed(env: Envelope) -> bool:
    return bool(env.deadline_unix_ms) and env.deadline_unix_ms < time.time() * 1000


def deadline_error() -> Rejected:
    return Rejected(
        ErrorCode.DEADLINE_EXCEEDED, "the request's deadline passed before generation", http_status=504
    )
