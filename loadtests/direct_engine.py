"""The pipeline-vs-engine workload against vLLM's AsyncLLM in-process: the floor Switchyard adds to.

Run as `python -m loadtests.direct_engine MODEL_DIR LEVELS_JSON MAX_TOKENS [auto|uni|mp] [all|switchyard]` (a
subprocess, so its engine is gone before the pipeline starts); prints `RESULT <json>`: one workload summary per
level. Placement `switchyard`: the engine process on the cores `switchyard up` gives the engine, the front end on
the services' cores, as in the vLLM worker (loadtests.rollouts does the same).
The engine is built by the worker's own `engine_args`, so the flags are the worker's.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


async def main(
    model_dir: str, levels: list[list[int]], max_tokens: int, executor: str = "auto", placement: str = "all"
) -> list[dict[str, Any]]:
    from loadtests.pipeline import pct, prompts
    from loadtests.stack import placed_asyncllm
    from shared.runtime.config import load_settings

    settings = load_settings(vllm_model_path=model_dir, vllm_enable_lora=False, vllm_cpu_executor=executor)
    llm = placed_asyncllm(settings, placement)
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
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tok.encode(text, add_special_tokens=False)
        ttft, tokens = None, 0
        async for out in llm.generate(TokensPrompt(prompt_token_ids=ids), params, f"direct-{counter}"):
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
        sem = asyncio.Semaphore(concurrency)

        async def guarded(p: list[dict[str, str]], sem: asyncio.Semaphore = sem) -> dict[str, Any]:
            async with sem:
                return await one(p)

        t0 = time.perf_counter()
        rs = await asyncio.gather(*(guarded(p) for p in ps))
        wall = time.perf_counter() - t0
        ttfts = [r["ttft_s"] * 1000 for r in rs if r["ttft_s"] is not None]
        tokens = sum(r["tokens"] for r in rs)
        results.append(
            {
                "concurrency": concurrency,
                "requests": n,
                "tokens": tokens,
                "wall_s": round(wall, 3),
                "tokens_per_s": round(tokens / wall, 1),
                "ttft_p50_ms": round(pct(ttfts, 0.5), 2),
                "ttft_p99_ms": round(pct(ttfts, 0.99), 2),
            }
        )
    llm.shutdown()
    return results


if __name__ == "__main__":
    out = asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]))
    print("RESULT " + json.dumps(out), flush=True)
