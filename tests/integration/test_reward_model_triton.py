"""The reward_model function against an existing Triton server of yours.

The embedded Triton (PyTriton wheel) runs the same function in every CI run:
tests/integration/test_triton_pool.py::test_reward_service_function_scores_a_group_on_triton.
Set TEST_TRITON_URL (gRPC host:port of a tritonserver on deploy/triton/models; skipped otherwise) and
optionally TEST_TRITON_REWARD_MODEL (default reward_model: inputs PROMPT, COMPLETION BYTES [batch, 1],
output SCORE FP32 [batch, 1]).
"""

from __future__ import annotations

import asyncio
import math
import os

import pytest

from shared.rewards import Sample, SpecItem, default_functions, score_group
from shared.runtime.envelope import DependencyUnavailable

URL = os.environ.get("TEST_TRITON_URL")
MODEL = os.environ.get("TEST_TRITON_REWARD_MODEL", "reward_model")


@pytest.mark.skipif(not URL, reason="no live Triton configured (TEST_TRITON_URL)")
def test_reward_model_scores_a_group_in_one_call() -> None:
    fns = default_functions(URL)
    samples = [Sample("What is 2+2?", t) for t in ("4", "five", "4, because 2+2=4")]
    got = asyncio.run(score_group(samples, [SpecItem("reward_model", 1.0, {"model": MODEL})], fns))
    assert len(got) == 3 and all(math.isfinite(g.reward) for g in got)
    assert all("reward_model" not in g.notes for g in got)


def test_unreachable_triton_is_waited_for() -> None:
    fns = default_functions("127.0.0.1:9")
    with pytest.raises(DependencyUnavailable):
        asyncio.run(
            score_group(
                [Sample("q", "a")], [SpecItem("reward_model", 1.0, {"model": "rm", "timeout_s": "2"})], fns
            )
        )
