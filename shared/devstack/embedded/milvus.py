"""The embedded vector store: the Milvus standalone server shipped in the PyPI package `milvus` (2.3.x).

The package's own `MilvusServer.start()` changes the working directory and starts the binary
without a process group of its own, so only its config writer and unpacker are used here: the
binary is started like the embedded broker (own session, dies with the launcher, bounded stop
ending in SIGKILL: it ignores SIGTERM for long, RUNTIME-NOTES). Data, config, logs and its pid
file live under `<var_dir>/milvus`; every component is bound to loopback. Production points
SY_MILVUS_URI at a Milvus instance and this module is never used.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from shared.devstack.embedded.spawn import spawn_server
from shared.runtime.procs import child_setup, free_port, stop_process, wait_port

# Components whose gRPC listener would otherwise bind the first non-loopback address.
_COMPONENTS = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")

# The Go GC target the query node's GC helper may raise the process to (Milvus' default is 200).
# A search or query allocates ~0.7 MB in the server; at 200 (27 MB live, goal ~80 MB) a collection
# ran every ~75 calls, ~150 ms under back-to-back lookups, its ~10 ms mark phase on both cores of
# a small host, and the call beside it waited (search p99 7-9 ms vs p50 2). At 1000 they come
# ~3.5x less often (p99 4-6 ms), for ~300 MB more heap; the helper still lowers the target as
# memory fills. GOGC in the environment would not do: the helper overrides it.
MAX_GOGC = 1000


class EmbeddedMilvus:
    def __init__(
        self,
        var_dir: Path,
        host: str = "127.0.0.1",
        base_dir: Path | None = None,
        cpus: frozenset[int] | None = None,
    ) -> None:
        self.base_dir = (base_dir or var_dir / "milvus").resolve()
        self.host = host
        self.cpus = cpus  # None: the cores this process has
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.metrics_port = 0
        self.log_path = self.base_dir / "logs" / "milvus-stdout.log"

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    def prepare(self) -> str:
        """Choose the ports and write the config (fast); returns the URI the server will have."""
        import milvus  # the embedded package; only needed when no SY_MILVUS_URI is set

        cfg = milvus.MilvusServerConfig(data_dir=str(self.base_dir))
        for comp in _COMPONENTS:
            cfg.set(f"{comp}.ip", self.host)
        # Kernel-chosen free ports (its own scan from 19530/2379 up races with a second instance).
        # resolve() holds each port bound while it checks the next, so they must be distinct (the
        # kernel may hand the same free port out twice), and another process may take one between
        # our choice and the check: choose again then (seen once in CI: "bind failed").
        keys = [k for k in cfg.configurable_items if k.endswith("_port")]
        for attempt in range(5):
            ports: list[int] = []
            while len(ports) < len(keys):
                if (p := free_port(self.host)) not in ports:
                    ports.append(p)
            cfg.update(**dict(zip(keys, ports, strict=True)))
            try:
                cfg.resolve()  # checks the ports, writes configs/milvus.yaml
                break
            except RuntimeError as exc:
                if "bind failed" not in str(exc) or attempt == 4:
                    raise
        self.port = int(cfg.get("proxy_port"))
        # The etcd peer and metrics ports are chosen after resolve() let go of the others: the
        # kernel may hand one of those out again (seen: etcd's peer port on the proxy's, and the
        # cache waited for a Milvus that never answered).
        self.metrics_port = self._another_port(ports)
        self._patch_config(self._embed_etcd_config(int(cfg.get("etcd_port")), self._another_port(ports)))
        return self.uri

    def _another_port(self, taken: list[int]) -> int:
        """A free port none of `taken` (which it joins)."""
        while (p := free_port(self.host)) in taken:
            pass
        taken.append(p)
        return p

    def _embed_etcd_config(self, client_port: int, peer_port: int) -> Path:
        """Give the in-process etcd its own loopback peer port (the default 2380 is fixed and shared)."""
        peer = f"http://{self.host}:{peer_port}"
        client = f"http://{self.host}:{client_port}"
        etcd_yaml = self.base_dir / "configs" / "embed-etcd.yaml"
        etcd_yaml.write_text(
            "name: default\n"
            f"listen-peer-urls: {peer}\n"
            f"initial-advertise-peer-urls: {peer}\n"
            f"initial-cluster: default={peer}\n"
            f"listen-client-urls: {client}\n"
            f"advertise-client-urls: {client}\n"
        )
        return etcd_yaml

    def _patch_config(self, etcd_yaml: Path) -> None:
        """What the package's config writer cannot set, in one rewrite of milvus.yaml: the embedded
        etcd's own config, loopback everywhere, and the GC helper's target (MAX_GOGC: the search
        latency tail)."""
        milvus_yaml = self.base_dir / "configs" / "milvus.yaml"
        text = milvus_yaml.read_text()
        if "\nqueryNode:\n" not in text or "gchelper" in text:
            raise RuntimeError(f"unexpected Milvus config layout in {milvus_yaml}")
        text = text.replace("\netcd:\n", f"\netcd:\n  config:\n    path: {etcd_yaml}\n", 1)
        text = text.replace("localhost:", f"{self.host}:")
        gc = f"\nqueryNode:\n  gchelper:\n    enabled: true\n    maximumGoGC: {MAX_GOGC}\n"
        milvus_yaml.write_text(text.replace("\nqueryNode:\n", gc, 1))

    def start(self, timeout_s: float = 180.0) -> None:
        """Start the server (a restart reuses the prepared ports) and wait until it is healthy."""
        import milvus

        if not self.port:
            self.prepare()
        milvus._initialize_data_files(str(self.base_dir))  # unpacks the binaries once (~250 MB)
        exe = self.base_dir / "bin" / "milvus"
        (self.base_dir / "run").mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(
            DEPLOY_MODE="STANDALONE",
            METRICS_PORT=str(self.metrics_port),
            MILVUS_RUN_DIR=str(self.base_dir / "run"),  # else /run/milvus/standalone.pid
            LD_LIBRARY_PATH=f"{exe.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        )
        self.proc = spawn_server(
            [str(exe), "run", "standalone"],
            self.log_path,
            env,
            cwd=self.base_dir,
            setup=child_setup(self.cpus),  # Go sizes GOMAXPROCS from the mask at start
        )
        if not self.wait_healthy(timeout_s):
            self.stop()
            raise RuntimeError(f"embedded Milvus did not become healthy on {self.uri}; see {self.log_path}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}/healthz", timeout=1) as r:
                return b"OK" in r.read()
        except (urllib.error.URLError, OSError):
            return False

    def wait_healthy(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if self.healthy() and wait_port(self.port, self.host, 0.5):
                return True
            time.sleep(0.2)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout_s` (it ignores SIGTERM for 40 s and more)."""
        if self.proc is not None:
            stop_process(self.proc, timeout_s=timeout_s)
            self.proc = None
