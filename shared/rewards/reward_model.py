"""A learned reward model served by Triton Inference Server, called over gRPC (tritonclient aio).

The model contract (what a reward model in the Triton model repository must expose):
- inputs  `PROMPT` and `COMPLETION`: TYPE_STRING (BYTES), shape [batch, 1], UTF-8 text;
- output  `SCORE`: TYPE_FP32, shape [batch, 1] (or [batch]), one scalar reward per row.
A group is one request (batch = group size); Triton's dynamic batcher may merge groups.
Names are overridable per spec (`input_prompt`, `input_completion`, `output`).

Params: `model` (default `reward_model`, the slot in deploy/triton/models), `url` (default
SY_REWARD_TRITON_URL, else SY_TRITON_URL), `timeout_s` (default 10).
A server that cannot be reached (gRPC UNAVAILABLE) raises DependencyUnavailable("triton"): the
bus waits for it to return and never dead-letters the group for it (issue 32). Any other error
of the call (an unknown model, a deadline) raises RewardUnavailable (the group is retried, then
DLQ'd). Never a silent zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.rewards.base import Params, RewardFunction, RewardUnavailable, Sample, Score, float_param
from shared.runtime.envelope import DependencyUnavailable
from shared.runtime.outages import TRITON, triton_down


def build_inputs(samples: Sequence[Sample], params: Params) -> list[Any]:
    """The two BYTES tensors of one group's request."""
    import numpy as np
    from tritonclient.grpc import InferInput

    rows = []
    for name, texts in (
        (params.get("input_prompt", "PROMPT"), [s.prompt for s in samples]),
        (params.get("input_completion", "COMPLETION"), [s.answer_text for s in samples]),
    ):
        arr = np.array([[t.encode("utf-8")] for t in texts], dtype=object)
        inp = InferInput(name, list(arr.shape), "BYTES")
        inp.set_data_from_numpy(arr)
        rows.append(inp)
    return rows


def parse_scores(raw: Any, n: int) -> list[Score]:
    """SCORE of shape [n, 1] or [n] -> one Score per sample."""
    import numpy as np

    flat = np.asarray(raw, dtype=np.float64).reshape(-1)
    if flat.shape[0] != n:
        raise ValueError(f"reward model returned {flat.shape[0]} scores for {n} samples")
    return [Score(float(v)) for v in flat]


DEFAULT_MODEL = "reward_model"


class TritonRewardModel(RewardFunction):
    name = "reward_model"

    def __init__(self, default_url: str | None) -> None:
        self.default_url = default_url
        self._clients: dict[str, Any] = {}

    def check(self, params: Params) -> None:
        if not (params.get("url") or self.default_url):
            raise ValueError("no Triton URL: set SY_REWARD_TRITON_URL (or SY_TRITON_URL) or param 'url'")
        if float_param(params, "timeout_s", 10.0) <= 0:
            raise ValueError("param 'timeout_s' must be positive")

    def _client(self, url: str) -> Any:
        if url not in self._clients:
            from tritonclient.grpc.aio import InferenceServerClient

            self._clients[url] = InferenceServerClient(url=url)
        return self._clients[url]

    async def score(self, samples: Sequence[Sample], params: Params) -> list[Score]:
        from tritonclient.grpc import InferRequestedOutput
        from tritonclient.utils import InferenceServerException

        if not samples:
            return []
        url = params.get("url") or self.default_url or ""
        model = params.get("model", DEFAULT_MODEL)
        output = params.get("output", "SCORE")
        try:
            result = await self._client(url).infer(
                model,
                build_inputs(samples, params),
                outputs=[InferRequestedOutput(output)],
                client_timeout=float_param(params, "timeout_s", 10.0),
            )
        except InferenceServerException as exc:
            if triton_down(exc):
                raise DependencyUnavailable(TRITON, f"reward model {model!r} at {url}: {exc}") from exc
            raise RewardUnavailable(f"reward model {model!r} at {url}: {exc}") from exc
        return parse_scores(result.as_numpy(output), len(samples))

    async def aclose(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
