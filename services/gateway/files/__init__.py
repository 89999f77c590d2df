"""The gateway's files routes (router.py) and their logic (serving.py)."""
