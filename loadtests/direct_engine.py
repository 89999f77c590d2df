"""The pipeline-vs-engine workload against vLLM's AsyncLLM in-process: the floor Switchyard adds to.

Run as `python -m loadtests.direct_engine MODEL_DIR LEVELS_JSON MAX_TOKENS [auto|uni|mp]` (a
subprocess, so its engine is gone before the pipeline starts); prints `RESULT <json>`: one
workload summary per level (loadtests.harness.client.level_summary).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from loadtests.harness.client import at_most, level_summary, prompts
from loadtests.harness.engine import open_asyncllm, print_result, prompt_ids


async def main(
    model_dir: str, levels: list[list[int]], max_tokens: int, executor: str = "auto"
) -> list[dict[str, Any]]:
    llm, _ = open_asyncllm(model_dir, vllm_enable_lora=False, vllm_cpu_executor=executor)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    tok = llm.get_tokenizer()
    params = SamplingParams(
        temperature=0, max_tokens=max_tokens, min_tokens=max_tokens, output_kind=RequestOutputKind.DELTA
    )
    counter = 0

    async def one(messages: list[dict[str, str]]) -> dict[str, Any]:
        nonlocal counter
        counter += 1
        t0 = time.perf_counter()
        req = TokensPrompt(prompt_token_ids=prompt_ids(tok, messages))
        ttft, tokens = None, 0
        async for out in llm.generate(req, params, f"direct-{counter}"):
            o = out.outputs[0]
            if ttft is None and o.text:
                ttft = time.perf_counter() - t0
            tokens += len(o.token_ids)
        return {"ttft_s": ttft, "tokens": tokens}

    results = []
    for concurrency, n in levels:
        ps = prompts(n)
        for p in ps[:2]:
            await one(p)
        t0 = time.perf_counter()
        rs = await at_most(concurrency, (one(p) for p in ps))
        wall = time.perf_counter() - t0
        ttfts = [r["ttft_s"] * 1000 for r in rs if r["ttft_s"] is not None]
        results.append(level_summary(concurrency, n, wall, sum(r["tokens"] for r in rs), ttfts))
    llm.shutdown()
    return results


if __name__ == "__main__":
    print_result(asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:5])))
