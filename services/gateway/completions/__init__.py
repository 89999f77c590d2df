"""The gateway's completions routes (router.py) and their logic (serving.py)."""
