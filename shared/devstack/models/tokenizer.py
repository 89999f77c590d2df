"""sy-tiny's tokenizer and chat template: trained on the synthetic tasks' text, saved in Hugging
Face format, and checked to render exactly what training renders (shared.devstack.models.build)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from shared.devstack.models import tasks


class BuildError(RuntimeError):
    """The build produced something that does not load or render as it must."""


PAD, BOS, EOS, END = "<|pad|>", "<|bos|>", "<|eos|>", "<|end|>"
ROLES: dict[str, str] = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, END, *ROLES.values())

# One string per turn: system/user end with <|end|>, assistant turns end with eos, so a model
# that stops at eos stops after its own turn. Must match `render` exactly (checked at build).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|assistant|>' + message['content'] + eos_token }}"
    "{% elif message['role'] in ['system', 'user'] %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% else %}"
    "{{ raise_exception('unsupported role: ' + message['role']) }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def render(messages: Sequence[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """The chat template in Python, for rendering training data fast."""
    parts = [BOS]
    for m in messages:
        if m["role"] == "assistant":
            parts.append(ROLES["assistant"] + m["content"] + EOS)
        else:
            parts.append(ROLES[m["role"]] + m["content"] + END)
    if add_generation_prompt:
        parts.append(ROLES["assistant"])
    return "".join(parts)


def train_tokenizer(spec: dict[str, Any], seed: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[A-Za-z0-9]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    examples = tasks.dataset(spec["corpus_examples"], seed=seed + 7919)
    corpus = [text for e in examples for text in (e.prompt, e.answer)]
    corpus += ["system", "user", "assistant"]
    trainer = trainers.BpeTrainer(
        vocab_size=spec["vocab_size"],
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    spare = spec["vocab_size"] - tok.get_vocab_size()
    if spare < 0:
        raise BuildError(f"tokenizer has {tok.get_vocab_size()} tokens, over vocab_size {spec['vocab_size']}")
    tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(spare)])
    return tok


def save_tokenizer(tok: Tokenizer, out: Path, max_len: int) -> None:
    tok.save(str(out / "tokenizer.json"))
    extra = [t for t in SPECIAL_TOKENS if t not in (PAD, BOS, EOS)]
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "additional_special_tokens": extra}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "extra_special_tokens": extra,
        "model_max_length": max_len,
        "padding_side": "left",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    write_json(out / "tokenizer_config.json", config)
    write_json(out / "special_tokens_map.json", special)


def check_template(hf_tok: Any) -> None:
    """The saved Jinja template must render exactly what training renders."""
    convo = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "Reverse: abc"},
    ]
    for gen in (True, False):
        got = hf_tok.apply_chat_template(convo, tokenize=False, add_generation_prompt=gen)
        if got != render(convo, add_generation_prompt=gen):
            raise BuildError(f"chat template renders {got!r}, training uses {render(convo, gen)!r}")
    ids = hf_tok(render(convo[:2], True), add_special_tokens=False)["input_ids"]
    if ids[0] != hf_tok.bos_token_id or hf_tok.convert_ids_to_tokens(ids[-1]) != ROLES["assistant"]:
        raise BuildError(f"special tokens are not atomic: {hf_tok.convert_ids_to_tokens(ids)}")


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
