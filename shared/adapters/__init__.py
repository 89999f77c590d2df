"""LoRA adapter references and the registry client, read by every stage that resolves a model name."""
