"""Each service receives only its settings sections (shared/runtime/config/services.py).

The static check reads every module a service runs (its folder and the shared modules they import,
transitively) for attributes named like a setting, and fails when one belongs to a section the
service does not receive: that read would be an AttributeError at run time.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from shared.runtime.config import (
    SECTIONS,
    SERVICE_SECTIONS,
    Settings,
    for_service,
    load_settings,
    sections_of,
)
from shared.runtime.config.derived import Derived

ROOT = Path(__file__).resolve().parents[2]
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if (p / "main.py").exists())
OWNER = {f: sec for sec in SECTIONS for f in sec.model_fields}
ATTR = re.compile(r"\.([a-z_][a-z0-9_]*)\b")
# Derived names are plain words (pool, topic, production): count them only on a settings object.
ON_SETTINGS = re.compile(r"\b(?:settings|s|cfg)\.([a-z_][a-z0-9_]*)\b")


def _derived_reads() -> dict[str, set[str]]:
    """Each derived property or method of the settings -> the fields it reads."""
    out = {}
    for name, member in vars(Derived).items():
        fn = member.fget if isinstance(member, property) else member
        if callable(fn):
            out[name] = set(re.findall(r"self\.([a-z_]+)", inspect.getsource(fn))) & set(OWNER)
    return out


def _path(module: str) -> Path | None:
    for p in (ROOT / (module.replace(".", "/") + ".py"), ROOT / module.replace(".", "/") / "__init__.py"):
        if p.exists():
            return p
    return None


def _imports(module: str, path: Path) -> list[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out += [base] + [f"{base}.{a.name}" for a in node.names]
    return out


def run_modules(service: str) -> dict[str, Path]:
    """Every module of services/<service> and the shared runtime modules they import."""
    todo = [f"services.{service}.{p.stem}" for p in (ROOT / "services" / service).glob("*.py")]
    todo += [
        f"services.{service}.{p.parent.name}.{p.stem}" for p in (ROOT / "services" / service).glob("*/*.py")
    ]
    seen: dict[str, Path] = {}
    while todo:
        module = todo.pop()
        path = _path(module)
        if module in seen or path is None or not module.startswith(("services.", "shared.")):
            continue
        if "devstack" in module or module.startswith("shared.runtime.config"):
            continue  # dev tooling is not in a service's run path; config is the table itself
        seen[module] = path
        todo += _imports(module, path)
    return seen


def foreign_reads(service: str) -> list[str]:
    allowed = set(sections_of(service))
    derived = _derived_reads()
    bad = []
    for module, path in sorted(run_modules(service).items()):
        text = path.read_text()
        names = set(ATTR.findall(text)) & set(OWNER)
        for derived_name in set(ON_SETTINGS.findall(text)) & set(derived):
            names |= derived[derived_name]
        bad += [f"{module} reads {f} ({OWNER[f].__name__})" for f in sorted(names) if OWNER[f] not in allowed]
    return bad


@pytest.mark.parametrize("service", SERVICES)
def test_service_reads_only_its_sections(service: str) -> None:
    assert service in SERVICE_SECTIONS, f"services/{service} has no entry in SERVICE_SECTIONS"
    assert foreign_reads(service) == []


def test_the_static_check_sees_a_foreign_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the cache section the cache service's own reads are foreign."""
    monkeypatch.setitem(SERVICE_SECTIONS, "cache", ())
    assert any("cache_similarity_floor" in line for line in foreign_reads("cache"))


def test_a_service_object_lacks_other_sections() -> None:
    router = load_settings("router")
    assert (
        router.kafka_bootstrap is None and router.router_pending_max > 0 and router.topic("x").endswith("x")
    )
    assert router.router_stale_s == 3 * router.heartbeat_interval_s  # derived across its sections
    with pytest.raises(AttributeError):
        router.milvus_uri  # noqa: B018  (the cache section's)
    with pytest.raises(AttributeError):
        router.media_max_images  # noqa: B018
    gateway = load_settings("gateway")
    assert set(type(gateway).model_fields) < set(Settings.model_fields)
    assert "vllm_enable_lora" in type(gateway).model_fields  # the whole VllmSettings section
    assert (
        "triton_url" not in type(gateway).model_fields
        and "router_pending_max" not in type(gateway).model_fields
    )


def test_every_section_is_read_by_some_service() -> None:
    used = {sec for s in SERVICE_SECTIONS for sec in sections_of(s)}
    launcher_only = {sec for sec in SECTIONS if sec.title == "Launcher"}
    assert set(SECTIONS) - used == launcher_only


def test_production_mode_agrees_across_services(monkeypatch: pytest.MonkeyPatch) -> None:
    """SY_MILVUS_URI alone means production; the router has no Milvus field but must agree."""
    monkeypatch.delenv("SY_ENV", raising=False)
    monkeypatch.setenv("SY_MILVUS_URI", "http://milvus:19530")
    assert all(load_settings(s).production for s in SERVICE_SECTIONS)
    assert load_settings("router").admin_auth_required
    monkeypatch.setenv("SY_ENV", "dev")
    assert not any(load_settings(s).production for s in SERVICE_SECTIONS)


def test_values_carry_over_and_stay_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SY_CACHE_SIMILARITY_FLOOR", "0.91")
    monkeypatch.setenv("SY_TOPIC_PREFIX", "t1.")
    cache = for_service(load_settings(), "cache")
    assert cache.cache_similarity_floor == 0.91 and cache.topic("prepared") == "t1.prepared"
    with pytest.raises(Exception):  # noqa: B017  (pydantic's frozen-instance error)
        cache.cache_similarity_floor = 0.5  # type: ignore[misc]
