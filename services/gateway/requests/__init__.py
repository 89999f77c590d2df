"""The gateway's requests routes (router.py) and their logic (serving.py)."""
