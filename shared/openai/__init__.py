"""The OpenAI wire format: request and response models, formatting of replies, and errors, used by
the gateway and the batch service alike."""
