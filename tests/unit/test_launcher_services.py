"""Which services `switchyard up` starts: the cache only when it is on (preprocess routes every
request past it otherwise, so it would only poll the broker), the Triton worker only with a
Triton pool; the gateway is told where to peek at the cache only when it runs; the cache's
embedding thread gets every core where the services are pinned to theirs."""

from __future__ import annotations

import os
from pathlib import Path

from shared.devstack import launcher as launcher_mod
from shared.runtime.config import Settings


def names(tmp_path: Path, **kw: object) -> list[str]:
    return launcher_mod.Launcher(Settings(var_dir=tmp_path, **kw), out=open(os.devnull, "w")).names  # noqa: SIM115


def test_the_cache_service_runs_only_when_the_cache_is_on(tmp_path: Path) -> None:
    assert "cache" in names(tmp_path, cache_enabled=True)
    off = names(tmp_path, cache_enabled=False)
    assert "cache" not in off and {"gateway", "preprocess", "router"} <= set(off)


def test_the_gateway_peeks_at_the_cache_it_started(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SY_CACHE_PEEK_URL", raising=False)
    up = launcher_mod.Launcher(Settings(var_dir=tmp_path), out=open(os.devnull, "w"))  # noqa: SIM115
    up.children.append(launcher_mod.Child("cache", 9999, {}, log_path=tmp_path / "cache.log"))
    assert up._env_for("gateway", 8000)["SY_CACHE_PEEK_URL"].endswith(":9999")
    assert "SY_CACHE_PEEK_URL" not in up._env_for("router", 9103)
    alone = launcher_mod.Launcher(Settings(var_dir=tmp_path), out=open(os.devnull, "w"))  # noqa: SIM115
    assert "SY_CACHE_PEEK_URL" not in alone._env_for("gateway", 8000)  # no cache started: no peek


def test_where_the_services_are_pinned_the_caches_embedder_gets_every_core(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SY_CACHE_EMBED_CPUS", raising=False)
    up = launcher_mod.Launcher(Settings(var_dir=tmp_path), out=open(os.devnull, "w"))  # noqa: SIM115
    assert "SY_CACHE_EMBED_CPUS" not in up._env_for("cache", 9105)  # nothing pinned
    up.all_cpus, up.service_cpus = frozenset({0, 1, 2, 3}), frozenset({3})
    assert up._env_for("cache", 9105)["SY_CACHE_EMBED_CPUS"] == "0,1,2,3"
    assert "SY_CACHE_EMBED_CPUS" not in up._env_for("router", 9103)


def test_the_wiring_table_gives_each_child_its_stack_and_keeps_what_the_user_set(tmp_path: Path) -> None:
    """shared/devstack/wiring.py ENV: overrides where the stack decides, the user's value where it may."""
    from shared.devstack.wiring import Stack, child_env

    settings = Settings(var_dir=tmp_path)
    stack = Stack(settings, "router", 9103, "127.0.0.1:9092", embedded_kafka=True, ports={"registry": 8011})
    env = child_env(stack, base={"SY_HEALTH_PORT": "1", "SY_KAFKA_SESSION_TIMEOUT_MS": "9000"})
    assert env["SY_HEALTH_PORT"] == "9103" and env["SY_INSTANCE_ID"] == "router-1"
    assert env["SY_KAFKA_BOOTSTRAP"] == "127.0.0.1:9092" and env["SY_ENV"] == "dev"
    assert env["SY_REGISTRY_URL"].endswith(":8011")
    assert env["SY_KAFKA_SESSION_TIMEOUT_MS"] == "9000"  # the user's own wins
    assert env["SY_KAFKA_HEARTBEAT_INTERVAL_MS"] == "500"
    assert "SY_MILVUS_URI" not in env and "SY_FRONTEND_CPUS" not in env
    remote = child_env(Stack(settings, "router", 9103, "kafka:9092", embedded_kafka=False), base={})
    assert "SY_KAFKA_SESSION_TIMEOUT_MS" not in remote and "SY_TOPIC_PARTITIONS" not in remote
    assert "SY_CELERY_BROKER" not in env  # no embedded Redis: Celery's own default


def test_celery_gets_the_embedded_redis_unless_the_user_named_a_broker(tmp_path: Path) -> None:
    from shared.devstack.wiring import Stack, child_env

    stack = Stack(
        Settings(var_dir=tmp_path),
        "batch",
        9108,
        "127.0.0.1:9092",
        True,
        redis_url="redis://127.0.0.1:6379/0",
    )
    assert child_env(stack, base={})["SY_CELERY_BROKER"] == "redis://127.0.0.1:6379/0"
    assert (
        child_env(stack, base={"SY_CELERY_BROKER": "redis://prod:6379/1"})["SY_CELERY_BROKER"]
        == "redis://prod:6379/1"
    )


def test_gateways_share_state_and_limits_in_the_embedded_redis_unless_the_user_named_one(
    tmp_path: Path,
) -> None:
    """Issue 37: replicas started by `switchyard up` (or beside it) count limits and keep async
    requests in one Redis, database 1 (Celery has database 0)."""
    from shared.devstack.wiring import Stack, child_env

    stack = Stack(
        Settings(var_dir=tmp_path),
        "gateway",
        8000,
        "127.0.0.1:9092",
        True,
        redis_url="redis://127.0.0.1:6379/0",
    )
    env = child_env(stack, base={})
    assert env["SY_GATEWAY_STATE_URL"] == env["SY_LIMITS_STORAGE_URI"] == "redis://127.0.0.1:6379/1"
    mine = child_env(stack, base={"SY_LIMITS_STORAGE_URI": "redis://prod:6379/3"})
    assert mine["SY_LIMITS_STORAGE_URI"] == "redis://prod:6379/3"
    none = child_env(Stack(Settings(var_dir=tmp_path), "gateway", 8000, "127.0.0.1:9092", True), base={})
    assert "SY_GATEWAY_STATE_URL" not in none and "SY_LIMITS_STORAGE_URI" not in none


def test_the_launcher_starts_no_redis_where_a_broker_is_named_or_nothing_uses_celery(tmp_path: Path) -> None:
    from shared.devstack.embedded.redis import start_embedded_redis

    said: list[str] = []
    named = Settings(var_dir=tmp_path, celery_broker="redis://r:6379/0")
    assert start_embedded_redis(named, ["batch", "gateway"], said.append) is None
    assert "SY_CELERY_BROKER" in said[0]
    assert start_embedded_redis(Settings(var_dir=tmp_path), ["router", "cache"], said.append) is None


def test_the_endpoints_file_keeps_its_shape(tmp_path: Path) -> None:
    import json

    up = launcher_mod.Launcher(Settings(var_dir=tmp_path), out=open(os.devnull, "w"))  # noqa: SIM115
    up.children.append(launcher_mod.Child("gateway", 8000, {}, log_path=tmp_path / "gateway.log"))
    up.write_endpoints()
    data = json.loads(launcher_mod.endpoints_file(up.s).read_text())
    assert list(data) == [
        "kafka",
        "embedded_kafka",
        "kafka_pid",
        "milvus",
        "embedded_milvus",
        "triton",
        "embedded_triton",
        "redis",
        "launcher_pid",
        "launcher_url",
        "services",
        "trace_file",
    ]
    assert data["services"]["gateway"] == {"url": "http://127.0.0.1:8000", "pid": None, "exits": {}}
