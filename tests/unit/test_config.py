from __future__ import annotations

import pytest

from shared.runtime.config import ConfigError, Settings, known_env_vars, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for k in list(os.environ):
        if k.startswith("SY_"):
            monkeypatch.delenv(k)


def test_defaults() -> None:
    s = load_settings()
    assert s.kafka_bootstrap is None  # embedded broker
    assert s.topic("requests") == "sy.requests"
    assert [p.name for p in s.pools] == ["vllm", "triton"]
    assert s.health_port_for("router") == 9103


def test_env_values_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SY_KAFKA_BOOTSTRAP", "k1:9092,k2:9092")
    monkeypatch.setenv("SY_TOPIC_PREFIX", "prod.")
    monkeypatch.setenv("SY_POOLS", '[{"name": "gpu", "engine": "vllm", "device": "gpu", "models": ["m"]}]')
    s = load_settings()
    assert s.kafka_bootstrap == "k1:9092,k2:9092"
    assert s.topic("dlq") == "prod.dlq"
    assert s.pools[0].device == "gpu"


def test_unknown_variable_fails_fast_with_suggestion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SY_KAFKA_BOOTSRAP", "x:1")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert "SY_KAFKA_BOOTSRAP: unknown setting" in str(exc.value)
    assert "did you mean SY_KAFKA_BOOTSTRAP" in str(exc.value)


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [
        ("SY_TOPIC_PARTITIONS", "zero", "valid integer"),
        ("SY_TOPIC_PARTITIONS", "0", "greater than or equal to 1"),
        ("SY_KAFKA_BOOTSTRAP", "nohost", "host:port"),
        ("SY_LOG_LEVEL", "LOUD", "INFO"),
        ("SY_POOLS", '[{"name": "a", "engine": "onnx", "models": ["m"]}]', "SY_POOLS.0.engine"),
        ("SY_POOLS", '[{"name": "a", "engine": "vllm", "models": []}]', "SY_POOLS.0.models"),
        ("SY_POOLS", "not json", "SY_POOLS"),
        ("SY_KAFKA_HEARTBEAT_INTERVAL_MS", "5000", "third of SY_KAFKA_SESSION_TIMEOUT_MS"),
    ],
)
def test_invalid_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert var in str(exc.value)
    assert needle in str(exc.value)


def test_secret_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SY_KAFKA_SASL_PASSWORD", "hunter2")
    monkeypatch.setenv("SY_KAFKA_SASL_MECHANISM", "PLAIN")  # invalid without SASL protocol
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert "hunter2" not in str(exc.value)


def test_every_setting_is_in_exactly_one_section() -> None:
    from shared.runtime.config import SECTIONS

    owners: dict[str, list[str]] = {}
    for section in SECTIONS:
        for name in section.model_fields:
            owners.setdefault(name, []).append(section.__name__)
    assert sorted(owners) == sorted(Settings.model_fields)
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
    assert len(known_env_vars()) == len(Settings.model_fields)


def test_sections_keep_their_validators(monkeypatch: pytest.MonkeyPatch) -> None:
    """A check defined in a section runs in the composed Settings."""
    monkeypatch.setenv("SY_CACHE_EMBED_CPUS", "not-a-core")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert "SY_CACHE_EMBED_CPUS" in str(exc.value)


def test_configuration_page_is_fresh() -> None:
    from shared.runtime.config.docs import DOCS_PAGE, docs_page

    page = DOCS_PAGE.read_text() if DOCS_PAGE.exists() else ""
    missing = [v for v in known_env_vars() if f"`{v}`" not in page]
    assert not missing, f"docs/configuration.md lacks {missing}: run `python -m shared.runtime.config --docs`"
    assert page == docs_page(), "docs/configuration.md is stale: run `python -m shared.runtime.config --docs`"


def test_section_validator_names_are_unique() -> None:
    """In the composed Settings a validator hides another of the same name from another section."""
    from shared.runtime.config import SECTIONS

    names = [
        name
        for section in SECTIONS
        for kind in (
            section.__pydantic_decorators__.field_validators,
            section.__pydantic_decorators__.model_validators,
        )
        for name in kind
    ]
    assert len(names) == len(set(names)), names
