"""Fixtures shared by integration tests: one embedded Milvus server per session (started lazily)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.devstack.embedded.milvus import EmbeddedMilvus


@pytest.fixture(scope="session")
def milvus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedMilvus]:
    """The Milvus standalone server of the PyPI `milvus` package, data under a temp dir."""
    server = EmbeddedMilvus(tmp_path_factory.mktemp("milvus"))
    server.start()
    yield server
    server.stop()
