"""Local models for development and tests, built here without downloads.

`tasks`: seeded samples of the checkable tasks (pure Python). `build`: the tiny text model sy-tiny,
from its parts `tokenizer` (tokenizer, chat template) and `training` (data, loop, evaluation).
`vlm`: sy-vlm, an image encoder in front of sy-tiny's decoder. `adapters`: random LoRA adapters
of a built base. All but `tasks` need torch, transformers or tokenizers: import them when used.
"""
