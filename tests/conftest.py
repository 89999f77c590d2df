from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.devstack.embedded.kafka import EmbeddedKafka
from shared.runtime.config import load_settings
from shared.runtime.kafka_admin import create_topics

# The tests point services at their own brokers and stores, which production mode would read as
# production endpoints (shared/runtime/config/ Settings.production); they run in dev mode unless a test
# sets SY_ENV=production itself (tests/unit/test_security_config.py).
os.environ.setdefault("SY_ENV", "dev")

_prefix_counter = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    """One real embedded Tansu broker for the session; tests isolate themselves by topic prefix."""
    kafka = EmbeddedKafka(tmp_path_factory.mktemp("kafka"))
    kafka.start()
    yield kafka
    kafka.stop()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    return f"t{next(_prefix_counter)}{abs(hash(request.node.name)) % 10000}."


@pytest.fixture
def topics(broker: EmbeddedKafka, prefix: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Create this test's topics on the broker; returns the prefix."""
    monkeypatch.setenv("SY_KAFKA_BOOTSTRAP", broker.bootstrap)
    monkeypatch.setenv("SY_KAFKA_EMBEDDED", "true")
    monkeypatch.setenv("SY_TOPIC_PREFIX", prefix)
    asyncio.run(create_topics(load_settings()))
    return prefix


@pytest.fixture
def var_dir(tmp_path: Path) -> Path:
    d = tmp_path / "var"
    d.mkdir()
    return d
