"""`switchyard up`: start the embedded parts and every service as child processes.

Each embedded part starts only when its production variable is unset (SY_KAFKA_BOOTSTRAP
for the broker). Children get their own process group and die with the launcher (PDEATHSIG);
a crashed service is restarted with backoff; a crashed embedded broker is restarted and its
topics re-created (its memory storage starts empty). Ctrl-C/SIGTERM stops services first
(the gateway and batch first, which answer what they hold open while the stages still run; then
the stages, which drain and commit), then the broker.

The launcher serves its own /healthz, /readyz and /metrics (SY_LAUNCHER_PORT): the embedded
broker's memory (`sy_embedded_broker_rss_bytes`) and an end-to-end canary
(shared/devstack/embedded/canary.py) whose failure makes /readyz false.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from aiokafka.admin import AIOKafkaAdminClient

from shared.devstack.embedded.canary import Canary, GatewayTraffic, KafkaProbe, Probe, RestProbe
from shared.devstack.embedded.kafka import BrokerMemoryWatch, EmbeddedKafka
from shared.devstack.embedded.milvus import EmbeddedMilvus
from shared.devstack.embedded.triton import EmbeddedTriton
from shared.runtime.admin import admin_headers
from shared.runtime.bus import client_kwargs
from shared.runtime.config import DEFAULT_PORTS, Settings
from shared.runtime.cpus import engine_cpus, format_cpus, pin_process, service_cpus
from shared.runtime.health import Health, HttpServer, health_app
from shared.runtime.procs import child_setup, free_port, kill_group, port_free, stop_process
from shared.runtime.topics import ensure_topics

# Every service of the design, in start order; those whose module does not exist yet are skipped.
SERVICES: tuple[str, ...] = (
    "registry",
    "preprocess",
    "cache",
    "router",
    "vllm_worker",
    "triton_worker",
    "reward",
    "batch",
    "gateway",
)


# The embedded broker's topics get one partition each unless SY_TOPIC_PARTITIONS says otherwise.
# `switchyard up` starts one consumer per group, so more partitions buy no parallelism, and Tansu
# pays for every partition of a fetch on every poll of its storage (offsets and a listing of the
# partition's batches): at concurrency 8, 4 partitions cost the broker 7.4-8.1 ms of CPU per
# request and 1 partition 4.9-6.3 (README "Topics"). Add partitions with the consumers that use them.
EMBEDDED_TOPIC_PARTITIONS = 1


def available_services() -> list[str]:
    root = importlib.util.find_spec("services")
    base = Path(next(iter(root.submodule_search_locations or []))) if root else Path()
    return [s for s in SERVICES if (base / s / "main.py").is_file()]


def endpoints_file(settings: Settings) -> Path:
    return settings.var_dir / "run" / "endpoints.json"


# Services that take requests in from outside; stopped (drained) before the stages behind them.
INGRESS = ("gateway", "batch")

# How often the launcher reads the embedded broker's RSS (a read of /proc: costs nothing).
BROKER_RSS_SAMPLE_S = 5.0

# The service that runs each pool engine: the canary asks for a model some started worker serves.
ENGINE_WORKERS = {"vllm": "vllm_worker", "triton": "triton_worker"}


@dataclass
class Child:
    name: str
    port: int
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    exits: dict[str, int] = field(default_factory=dict)  # why it died: "SIGKILL" (OOM killer?), "code 1"
    started_at: float = 0.0
    pump: asyncio.Task[None] | None = None
    log_path: Path = field(default_factory=Path)

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-m", f"services.{self.name}.main"]


class Launcher:
    def __init__(self, settings: Settings, services: list[str] | None = None, out: object = None) -> None:
        self.s = settings
        self.names = services if services is not None else available_services()
        if not any(p.engine == "triton" for p in settings.pools):
            self.names = [n for n in self.names if n != "triton_worker"]  # no Triton pool configured
        if not settings.cache_enabled:  # preprocess routes past it: an idle consumer costs CPU
            self.names = [n for n in self.names if n != "cache"]
        self.kafka: EmbeddedKafka | None = None
        self.children: list[Child] = []
        self.bootstrap = settings.kafka_bootstrap or ""
        self.milvus: EmbeddedMilvus | None = None
        self.milvus_uri = settings.milvus_uri or ""
        self._milvus_start: asyncio.Future[None] | None = None
        self.triton: EmbeddedTriton | None = None  # issue 6: the Triton pool's server
        self.triton_url = settings.triton_url or ""
        self.triton_metrics_url = settings.triton_metrics_url or ""
        self._triton_start: asyncio.Future[None] | None = None
        self._stopping = asyncio.Event()
        # Own threads for the blocking pipe reads (one per child, for its lifetime) and the stops:
        # on the loop's default pool (cpu+4 threads) seven pumps left no thread to stop anything.
        self._pump_pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="pump")
        self._stop_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="stop")
        self._out = out or sys.stdout
        self.logs_dir = settings.var_dir / "run" / "logs"
        # Cores for everything but the vLLM engine (shared/runtime/cpus.py), set by pin_cpus.
        self.all_cpus = frozenset(os.sched_getaffinity(0))
        self.service_cpus: frozenset[int] | None = None
        # The launcher's own /healthz /readyz /metrics (issue 32): ready once every service is,
        # and while the canary goes through.
        self.health = Health("launcher")
        self.admin: HttpServer | None = None
        self.canary: Canary | None = None
        self.broker_memory = BrokerMemoryWatch(settings.broker_rss_warn_mb * 2**20, self.say)
        self._watchers: list[asyncio.Task[None]] = []
        self._http: httpx.AsyncClient | None = None

    def pin_cpus(self) -> None:
        """When a vLLM worker runs here, move the launcher onto the services' cores, so the
        broker, Triton and every service inherit them; the vLLM worker (see _spawn) and the
        embedded Milvus (see start_milvus) are started on wider masks."""
        if "vllm_worker" not in self.names:
            return
        try:
            self.service_cpus = service_cpus(self.s.service_cpus, self.all_cpus)
        except ValueError as exc:
            raise RuntimeError(str(exc)) from None
        if self.service_cpus is None:
            return
        pin_process(self.service_cpus)
        self.say(
            f"cpus: everything but the vLLM engine on {format_cpus(self.service_cpus)} of "
            f"{format_cpus(self.all_cpus)} (SY_SERVICE_CPUS)"
        )

    def say(self, line: str) -> None:
        print(line, file=self._out, flush=True)  # type: ignore[call-overload]

    # ---------------------------------------------------------------- admin endpoint
    @property
    def admin_url(self) -> str:
        return f"http://{self.s.health_host}:{self.admin.port}" if self.admin is not None else ""

    async def start_admin(self) -> None:
        """/healthz, /readyz and /metrics of the launcher itself, on SY_LAUNCHER_PORT (0: any)."""
        port = self.s.launcher_port
        if port and not port_free(port, self.s.health_host):
            raise RuntimeError(f"SY_LAUNCHER_PORT {port} is in use on {self.s.health_host}")
        self.admin = HttpServer(health_app(self.health), self.s.health_host, port, graceful_s=1.0)
        await self.admin.start()
        self.say(f"launcher: /healthz /readyz /metrics on {self.admin_url} (SY_LAUNCHER_PORT)")

    def _canary_model(self) -> str | None:
        """The first model of the first pool whose worker this launcher starts."""
        for pool in self.s.pools:
            if ENGINE_WORKERS.get(pool.engine) in self.names:
                return pool.models[0]
        return None

    def build_canary(self) -> Canary | None:
        """The canary over the paths this stack can answer: REST through the gateway, and a raw
        record through preprocess; none without the router and a worker (a `--services` subset)."""
        model = self._canary_model()
        if self.s.canary_interval_s <= 0 or model is None or "router" not in self.names:
            return None
        api_key, tenant = next(iter(self.s.api_keys.items()), ("", "local"))
        self._http = httpx.AsyncClient(headers=admin_headers(self.s))  # /metrics is an admin path
        probes: dict[str, Probe] = {}
        gateway = next((c for c in self.children if c.name == "gateway"), None)
        gateway_url = f"http://{self.s.health_host}:{gateway.port}" if gateway else ""
        if gateway is not None and api_key:
            probes["rest"] = RestProbe(self._http, gateway_url, api_key, model)
        if "preprocess" in self.names:
            probes["kafka"] = KafkaProbe(self._child_settings(), tenant, model, self.s.canary_timeout_s)
        if not probes:
            return None
        return Canary(
            probes,
            interval_s=self.s.canary_interval_s,
            timeout_s=self.s.canary_timeout_s,
            traffic=GatewayTraffic(self._http, f"{gateway_url}/metrics") if gateway else None,
            say=self.say,
        )

    def start_watchers(self) -> None:
        """Once every service is ready: /readyz reflects the canary, and the canary starts."""
        self.canary = self.build_canary()
        if self.canary is not None:
            self.health.add_check("canary", self.canary.ready)
            self._watchers.append(asyncio.create_task(self.canary.run(self._stopping)))
        self.health.built = True

    async def watch_broker_memory(self) -> None:
        """Sample the embedded broker's RSS into sy_embedded_broker_rss_bytes until stopped."""
        while not self._stopping.is_set():
            if self.kafka is not None and self.kafka.proc is not None:
                self.broker_memory.sample(self.kafka.proc.pid)
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=BROKER_RSS_SAMPLE_S)
            except TimeoutError:
                pass

    # ---------------------------------------------------------------- broker
    async def _ensure_topics(self) -> list[str]:
        deadline = time.monotonic() + 30
        while True:
            admin = AIOKafkaAdminClient(**client_kwargs(self._child_settings()), request_timeout_ms=5000)  # type: ignore[arg-type]
            try:
                await admin.start()
                return await ensure_topics(admin, self._child_settings())
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
            finally:
                await admin.close()

    def _child_settings(self) -> Settings:
        return self.s.model_copy(update={"kafka_bootstrap": self.bootstrap})

    async def start_broker(self) -> None:
        if self.s.kafka_bootstrap:
            self.say(f"kafka: using {self.s.kafka_bootstrap} (SY_KAFKA_BOOTSTRAP)")
        else:
            self.kafka = EmbeddedKafka(self.s.var_dir, port=self.s.kafka_port)
            if "topic_partitions" not in self.s.model_fields_set:
                self.s = self.s.model_copy(update={"topic_partitions": EMBEDDED_TOPIC_PARTITIONS})
            self.kafka.start()
            self.bootstrap = self.kafka.bootstrap
            self.say(f"kafka: embedded Tansu broker on {self.bootstrap} (log {self.kafka.log_path})")
            self._watchers.append(asyncio.create_task(self.watch_broker_memory()))
        created = await self._ensure_topics()
        self.say(f"kafka: {len(created)} topics created")

    # ---------------------------------------------------------------- vector store
    async def start_milvus(self) -> None:
        """Embedded Milvus unless SY_MILVUS_URI is set; it starts in the background (7-10 s, more on
        first run when its binaries unpack): the cache service waits for it in its readiness."""
        if self.s.milvus_uri:
            self.say(f"milvus: using {self.s.milvus_uri} (SY_MILVUS_URI)")
            return
        if "cache" not in self.names or not self.s.cache_enabled:
            return
        # Every core, not the services' one: a query crosses several of the server's goroutines and
        # threads, and on the services' core each wake-up queued behind the stack's busy processes
        # (exact-tier query p50 11-19 ms there, 6-8 ms on every core; measured with the stack up).
        self.milvus = EmbeddedMilvus(self.s.var_dir, cpus=self.all_cpus if self.service_cpus else None)
        loop = asyncio.get_running_loop()
        self.milvus_uri = await loop.run_in_executor(None, self.milvus.prepare)
        self._milvus_start = loop.run_in_executor(None, self.milvus.start)
        self.say(
            f"milvus: embedded Milvus standalone starting on {self.milvus_uri} (data {self.milvus.base_dir})"
        )

    def _milvus_died(self) -> bool:
        return (
            self.milvus is not None
            and self._milvus_start is not None
            and self._milvus_start.done()
            and not self.milvus.alive()
        )

    # ---------------------------------------------------------------- Triton (issue 6)
    async def start_triton(self) -> None:
        """Embedded tritonserver unless SY_TRITON_URL is set or no pool runs on Triton; it starts in
        the background (its models load in 5-20 s): the Triton worker waits for it."""
        if self.s.triton_url:
            self.say(f"triton: using {self.s.triton_url} (SY_TRITON_URL)")
            return
        if "triton_worker" not in self.names or not any(p.engine == "triton" for p in self.s.pools):
            return
        self.triton = EmbeddedTriton(self.s.var_dir, models_dir=self.s.model_dir)
        loop = asyncio.get_running_loop()
        self.triton_url = await loop.run_in_executor(None, self.triton.prepare)  # the venv, on first run
        self.triton_metrics_url = self.triton.metrics_url
        self._triton_start = loop.run_in_executor(None, self.triton.start)
        self.say(f"triton: embedded tritonserver starting on {self.triton_url} (log {self.triton.log_path})")

    def _triton_died(self) -> bool:
        return (
            self.triton is not None
            and self._triton_start is not None
            and self._triton_start.done()
            and not self.triton.alive()
        )

    # ---------------------------------------------------------------- services
    def _env_for(self, name: str, port: int) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["SY_KAFKA_BOOTSTRAP"] = self.bootstrap
        # The children see the embedded parts' addresses as set endpoints: tell them which mode
        # the user's own settings mean (dev unless they named a production endpoint or SY_ENV).
        env["SY_ENV"] = "production" if self.s.production else "dev"
        env["SY_HEALTH_PORT"] = str(port)
        env["SY_INSTANCE_ID"] = f"{name}-1"
        env.setdefault("SY_VAR_DIR", str(self.s.var_dir))
        env.setdefault("SY_TRACE_FILE", str(self.s.var_dir / "run" / "spans.jsonl"))
        if self.milvus_uri:
            env["SY_MILVUS_URI"] = self.milvus_uri
        if self.triton_url:
            env["SY_TRITON_URL"] = self.triton_url
            if self.triton_metrics_url:
                env["SY_TRITON_METRICS_URL"] = self.triton_metrics_url
        # The registry starts first; its port may not be 8001 when that was busy.
        reg = port if name == "registry" else next((c.port for c in self.children if c.name == "registry"), 0)
        if reg:
            env.setdefault("SY_REGISTRY_URL", f"http://{self.s.health_host}:{reg}")
        # The gateway peeks at the cache's lookup (it starts after the cache, so its port is known).
        cache = next((c.port for c in self.children if c.name == "cache"), 0)
        if name == "gateway" and cache and self.s.cache_enabled:
            env.setdefault("SY_CACHE_PEEK_URL", f"http://{self.s.health_host}:{cache}")
        if name == "vllm_worker" and self.service_cpus is not None:
            env["SY_FRONTEND_CPUS"] = format_cpus(self.service_cpus)
        if name == "cache" and self.service_cpus is not None:
            # Its embedding thread on every core, like Milvus (config: cache_embed_cpus).
            env.setdefault("SY_CACHE_EMBED_CPUS", format_cpus(self.all_cpus))
        if self.kafka is not None:
            # Embedded broker: joining a group takes about half the session timeout, so keep it short.
            env.setdefault("SY_KAFKA_SESSION_TIMEOUT_MS", "3000")
            env.setdefault("SY_KAFKA_HEARTBEAT_INTERVAL_MS", "500")
            env.setdefault("SY_TOPIC_PARTITIONS", str(self.s.topic_partitions))
        return env

    def _port_for(self, name: str) -> int:
        port = DEFAULT_PORTS.get(name, 0)
        return port if port and port_free(port, self.s.health_host) else free_port(self.s.health_host)

    def _spawn(self, child: Child) -> None:
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        cpus = None
        if child.name == "vllm_worker" and self.service_cpus is not None:
            # The engine it starts keeps these cores (every core, or those the services leave).
            cpus = engine_cpus(self.s.engine_cpus, self.all_cpus, self.service_cpus)
        child.proc = subprocess.Popen(
            child.argv,
            env=child.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=child_setup(cpus),
        )
        child.started_at = time.monotonic()
        child.pump = asyncio.create_task(self._pump(child, child.proc))

    async def _pump(self, child: Child, proc: subprocess.Popen[bytes]) -> None:
        """Copy a child's output to var/run/logs/<name>.log and to our stdout, prefixed."""
        assert proc.stdout is not None
        loop = asyncio.get_running_loop()
        width = max(len(n) for n in self.names) if self.names else 8
        with open(child.log_path, "ab") as f:  # noqa: ASYNC230 - one open per child start
            while True:
                line = await loop.run_in_executor(self._pump_pool, proc.stdout.readline)
                if not line:
                    break
                f.write(line)
                f.flush()
                self.say(f"{child.name:<{width}} | {line.decode(errors='replace').rstrip()}")

    async def start_services(self) -> None:
        for name in self.names:
            port = self._port_for(name)
            child = Child(name, port, self._env_for(name, port), log_path=self.logs_dir / f"{name}.log")
            self.children.append(child)
            self._spawn(child)

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        pending = {c.name: c for c in self.children}
        async with httpx.AsyncClient(timeout=1.0) as http:
            while pending:
                for name, c in list(pending.items()):
                    if c.proc is not None and c.proc.poll() is not None:
                        raise RuntimeError(f"{name} exited with code {c.proc.returncode}; see {c.log_path}")
                    try:
                        r = await http.get(f"http://{self.s.health_host}:{c.port}/readyz")
                        if r.status_code == 200:
                            del pending[name]
                    except httpx.HTTPError:
                        pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not ready after {timeout_s:.0f}s: {sorted(pending)}")
                await asyncio.sleep(0.2)

    def write_endpoints(self) -> dict[str, object]:
        data: dict[str, object] = {
            "kafka": self.bootstrap,
            "embedded_kafka": self.kafka is not None,
            "kafka_pid": self.kafka.proc.pid if self.kafka is not None and self.kafka.proc else None,
            "milvus": self.milvus_uri,
            "embedded_milvus": self.milvus is not None,
            "triton": self.triton_url,
            "embedded_triton": self.triton is not None,
            "launcher_pid": os.getpid(),
            "launcher_url": self.admin_url,  # its /healthz /readyz /metrics
            "services": {
                c.name: {
                    "url": f"http://{self.s.health_host}:{c.port}",
                    "pid": c.proc.pid if c.proc else None,
                    # SIGKILL not sent by the launcher is most often the kernel's OOM killer.
                    "exits": dict(c.exits),
                }
                for c in self.children
            },
            "trace_file": str(self.s.var_dir / "run" / "spans.jsonl"),
        }
        path = endpoints_file(self.s)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, path)
        return data

    # ---------------------------------------------------------------- supervision
    async def supervise(self) -> None:
        """Restart what died until asked to stop."""
        while not self._stopping.is_set():
            if self.kafka is not None and not self.kafka.alive():
                self.say("kafka: embedded broker exited; restarting it and re-creating topics")
                self.kafka.start()
                created = await self._ensure_topics()
                self.say(f"kafka: broker restarted on {self.bootstrap}; {len(created)} topics re-created")
                self.write_endpoints()
            if self._milvus_died():
                self.say("milvus: embedded server exited; restarting it on the same ports")
                self._milvus_start = asyncio.get_running_loop().run_in_executor(None, self.milvus.start)  # type: ignore[union-attr]
            if self._triton_died():
                self.say("triton: embedded server exited; restarting it on the same ports")
                self._triton_start = asyncio.get_running_loop().run_in_executor(None, self.triton.start)  # type: ignore[union-attr]
            for c in self.children:
                if c.proc is not None and c.proc.poll() is not None and not self._stopping.is_set():
                    code = c.proc.returncode
                    why = f"{signal.Signals(-code).name}" if code < 0 else f"code {code}"
                    c.exits[why] = c.exits.get(why, 0) + 1
                    kill_group(c.proc.pid)  # what the dead service started (vLLM's EngineCore) goes too
                    delay = min(30.0, 0.5 * 2 ** min(c.restarts, 6))
                    if time.monotonic() - c.started_at > 60:
                        c.restarts, delay = 0, 0.5
                    self.say(f"{c.name} exited with code {code}; restarting in {delay:.1f}s")
                    c.restarts += 1
                    c.proc = None
                    await asyncio.sleep(delay)
                    if not self._stopping.is_set():
                        self._spawn(c)
                        self.write_endpoints()
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=0.5)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        self._stopping.set()
        self.health.draining = True
        for task in self._watchers:  # a canary round in flight is cut short
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
        loop = asyncio.get_running_loop()
        # The entry points first: the gateway drains (answers the requests it holds open, refuses
        # new ones) while every stage behind it still runs; then the stages together, each
        # finishing its in-flight records. What stays in a topic waits for the next start.
        live = [c for c in self.children if c.proc is not None]
        for wave in (
            [c for c in live if c.name in INGRESS],
            [c for c in live if c.name not in INGRESS],
        ):
            await asyncio.gather(
                *(
                    loop.run_in_executor(self._stop_pool, stop_process, c.proc, self.s.drain_timeout_s + 5)
                    for c in wave
                )
            )
        for c in self.children:
            if c.pump is not None:
                await asyncio.gather(c.pump, return_exceptions=True)
        if self.kafka is not None:
            self.kafka.stop()
        if self.triton is not None:
            await loop.run_in_executor(None, self.triton.stop)
            if self._triton_start is not None:
                await asyncio.wait({self._triton_start}, timeout=30)
            await loop.run_in_executor(None, self.triton.stop)
        if self.milvus is not None:  # bounded: SIGTERM, then SIGKILL (it ignores SIGTERM for long)
            await loop.run_in_executor(None, self.milvus.stop)
            if self._milvus_start is not None:  # a start still unpacking or waiting gives up once killed
                await asyncio.wait({self._milvus_start}, timeout=30)
            await loop.run_in_executor(None, self.milvus.stop)
        endpoints_file(self.s).unlink(missing_ok=True)
        if self.admin is not None:
            await self.admin.stop()


async def up(settings: Settings, services: list[str] | None = None) -> int:
    launcher = Launcher(settings, services)
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_requested.set)
    rc = 0
    # A launcher that was killed left its endpoints behind: whoever waits for this file must not
    # find the dead stack's addresses.
    endpoints_file(settings).unlink(missing_ok=True)
    try:
        launcher.pin_cpus()
        await launcher.start_admin()
        await launcher.start_broker()
        await launcher.start_milvus()
        await launcher.start_triton()
        await launcher.start_services()
        ready = asyncio.create_task(launcher.wait_ready(settings.ready_timeout_s))
        stopper = asyncio.create_task(stop_requested.wait())
        await asyncio.wait([ready, stopper], return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            ready.result()
            data = launcher.write_endpoints()
            launcher.say("switchyard is up:")
            launcher.say(f"  kafka      {data['kafka']}")
            launcher.say(f"  launcher   {data['launcher_url']}  (/readyz /metrics: canary, broker memory)")
            for name, info in data["services"].items():  # type: ignore[union-attr]
                launcher.say(f"  {name:<10} {info['url']}  (/readyz /metrics)")
            launcher.say(f"  traces     {data['trace_file']}")
            gw = data["services"].get("gateway")  # type: ignore[union-attr]
            if gw:
                keys = "set in SY_API_KEYS" if "SY_API_KEYS" in os.environ else "sk-switchyard-local"
                launcher.say(f"OpenAI API: {gw['url']}/v1  (API key: {keys})")
            launcher.say("Ctrl-C stops everything.")
            launcher.start_watchers()
            supervise = asyncio.create_task(launcher.supervise())
            await stopper
            supervise.cancel()
        else:
            ready.cancel()
    except (RuntimeError, TimeoutError) as exc:
        launcher.say(f"switchyard up failed: {exc}")
        rc = 1
    finally:
        launcher.say("stopping...")
        await launcher.stop()
        launcher.say("stopped")
    return rc
