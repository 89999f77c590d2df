"""The LoRA adapter registry: validation, versions and aliases over object storage, events to sy.adapters."""
