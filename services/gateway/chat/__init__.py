"""The gateway's chat routes (router.py) and their logic (serving.py)."""
