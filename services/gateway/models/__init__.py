"""The gateway's models routes (router.py) and their logic (serving.py)."""
