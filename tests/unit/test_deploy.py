"""The compose file agrees with the settings module (no Docker engine here: parse it)."""

from __future__ import annotations

from pathlib import Path

import yaml

from shared.config import DEFAULT_PORTS, known_env_vars
from shared.launcher import available_services

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_every_service_process_is_in_compose_with_a_healthcheck() -> None:
    services = compose()["services"]
    for name in available_services():
        assert name in services, f"{name} missing from docker-compose.yml"
        svc = services[name]
        assert "healthcheck" in svc, name
        port = str(DEFAULT_PORTS[name])
        assert svc["environment"]["SY_HEALTH_PORT"] == port
        assert port in " ".join(svc["healthcheck"]["test"])


def test_compose_uses_only_known_settings_and_pinned_images() -> None:
    known = set(known_env_vars())
    for name, svc in compose()["services"].items():
        for var in svc.get("environment", {}):
            if var.startswith("SY_"):
                assert var in known, f"{name}: unknown setting {var}"
        image = svc.get("image", "")
        assert ":" in image and not image.endswith(":latest"), f"{name}: image not pinned: {image!r}"
