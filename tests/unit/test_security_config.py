"""Production mode refuses default secrets and plain-text keys (shared/runtime/production.py); hashed API keys work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from shared.runtime.auth import hash_key, tenant_for_key
from shared.runtime.config import ConfigError, Settings
from shared.runtime.production import (
    DEFAULT_API_KEY,
    HeldSecrets,
    production_problems,
    refuse_unsafe_production,
)

ROOT = Path(__file__).resolve().parents[2]
GOOD_TOKEN = SecretStr("0123456789abcdef0123456789abcdef")


def test_hashed_keys_authenticate_and_plain_keys_still_work_in_dev() -> None:
    keys = {hash_key("sk-acme-123"): "acme", "sk-globex": "globex"}
    assert tenant_for_key(keys, "sk-acme-123") == "acme"
    assert tenant_for_key(keys, "sk-globex") == "globex"
    assert tenant_for_key(keys, hash_key("sk-acme-123")) is None  # the stored hash is not a key
    assert tenant_for_key(keys, "sk-acme-12") is None
    assert hash_key("x").startswith("sha256:") and len(hash_key("x")) == 7 + 64


DEFAULTS = HeldSecrets(tenant_keys={DEFAULT_API_KEY: "local"}, token="sy-internal-local")


def test_dev_mode_accepts_the_embedded_defaults() -> None:
    refuse_unsafe_production(Settings(env="dev"), DEFAULTS)


def test_production_mode_names_every_unsafe_secret() -> None:
    problems = "\n".join(production_problems(DEFAULTS))
    assert "default key" in problems and "SY_INTERNAL_TOKEN" in problems
    with pytest.raises(ConfigError, match="SY_ENV=production"):
        refuse_unsafe_production(Settings(env="production"), DEFAULTS)
    # a process that holds no key map and no token (the router) has nothing to refuse
    refuse_unsafe_production(Settings(env="production"), HeldSecrets())
    token = GOOD_TOKEN.get_secret_value()
    plain = HeldSecrets(tenant_keys={"sk-real": "acme"}, token=token)
    assert ["plain-text" in p for p in production_problems(plain)] == [True]
    hashed_default = HeldSecrets(tenant_keys={hash_key(DEFAULT_API_KEY): "x"}, token=token)
    assert ["default key" in p for p in production_problems(hashed_default)] == [True]
    assert ["SY_INTERNAL_TOKEN" in p for p in production_problems(HeldSecrets(token="short"))] == [True]
    short = HeldSecrets(token=token, signing_secrets={"acme": "short"})
    assert ["SY_INGEST_SECRETS" in p for p in production_problems(short)] == [True]
    assert production_problems(HeldSecrets(tenant_keys={hash_key("sk-real"): "acme"}, token=token)) == []
    # a production endpoint without SY_ENV is production too
    with pytest.raises(ConfigError, match="a production endpoint is set"):
        refuse_unsafe_production(Settings(milvus_uri="http://milvus:19530", env=None), DEFAULTS)


def test_a_service_started_in_production_with_defaults_exits_with_the_reason() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    env.update(SY_ENV="production", SY_KAFKA_BOOTSTRAP="127.0.0.1:1")
    r = subprocess.run(
        [sys.executable, "-m", "services.gateway.main"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert "default key 'sk-switchyard-local'" in r.stderr and "SY_INTERNAL_TOKEN" in r.stderr
    assert "sk-switchyard-local" not in r.stdout
