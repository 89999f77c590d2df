"""The gateway's vLLM-compatible /tokenize and /detokenize (router.py) and their logic (serving.py)."""
