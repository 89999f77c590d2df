"""The gateway's batches routes (router.py) and their logic (serving.py)."""
