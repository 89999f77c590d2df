"""Greedy outputs from vLLM's engine called directly (no Switchyard), for comparison tests.

Usage: python -m tests.helpers.direct_engine MODEL_DIR PROMPTS_JSON  -> prints a JSON list of texts.
Prompts are chat messages lists; the engine is built by the worker's own engine_args so the
flags are identical.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(model_dir: str, prompts: list[list[dict[str, str]]], max_tokens: int) -> list[str]:
    from services.vllm_worker.engine import engine_args, engine_environment
    from shared.runtime.config import load_settings

    settings = load_settings(vllm_model_path=model_dir, vllm_enable_lora=False)  # the plain engine
    engine_environment(settings)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = AsyncLLM.from_engine_args(engine_args(settings))
    tok = llm.get_tokenizer()
    outs = []
    for i, messages in enumerate(prompts):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tok.encode(text, add_special_tokens=False)
        final = ""
        async for o in llm.generate(
            TokensPrompt(prompt_token_ids=ids),
            SamplingParams(temperature=0, max_tokens=max_tokens),
            f"direct-{i}",
        ):
            final = o.outputs[0].text
        outs.append(final)
    llm.shutdown()
    return outs


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])))
    print("RESULT " + json.dumps(result))
