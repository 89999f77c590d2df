"""Fault tests reuse the e2e fixtures (the locally built model)."""

from tests.e2e.conftest import model_dir  # noqa: F401
