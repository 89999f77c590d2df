"""The gateway's rollouts routes (router.py) and their logic (serving.py)."""
