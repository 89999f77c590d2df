"""`switchyard up`: start the embedded parts and every service as child processes.

Each embedded part (broker, Redis, Milvus, Triton) starts only when its production variable is
unset (SY_KAFKA_BOOTSTRAP, SY_CELERY_BROKER, ...). Children get their own process group and die
with the launcher (PDEATHSIG); a crashed service is restarted with backoff, a crashed broker too,
with its topics re-created. Ctrl-C/SIGTERM stops the gateway and batch first (they answer what
they hold open while the stages still run), then the stages (they drain and commit), then the broker.

Its own /healthz, /readyz, /metrics (SY_LAUNCHER_PORT) carry the broker's memory
(`sy_embedded_broker_rss_bytes`) and an end-to-end canary (embedded/canary.py) that gates /readyz.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from aiokafka.admin import AIOKafkaAdminClient

from shared.devstack.children import Background, Child, pump, wait_ready
from shared.devstack.embedded.canary import Canary, stack_canary
from shared.devstack.embedded.kafka import BrokerMemoryWatch, EmbeddedKafka
from shared.devstack.embedded.milvus import EmbeddedMilvus
from shared.devstack.embedded.redis import EmbeddedRedis, start_embedded_redis
from shared.devstack.embedded.triton import EmbeddedTriton
from shared.devstack.wiring import (
    EMBEDDED_TOPIC_PARTITIONS,
    INGRESS,
    SERVICES,
    Endpoints,
    ServiceEndpoint,
    Stack,
    child_env,
    endpoints_file,
    wanted,
)
from shared.runtime.admin import admin_headers
from shared.runtime.bus import client_kwargs
from shared.runtime.config import DEFAULT_PORTS, Settings
from shared.runtime.cpus import engine_cpus, format_cpus, pin_process, service_cpus
from shared.runtime.health import Health, HttpServer, health_app
from shared.runtime.procs import free_port, port_free, stop_process
from shared.runtime.topics import ensure_topics

# How often the launcher reads the embedded broker's RSS (a read of /proc: costs nothing).
BROKER_RSS_SAMPLE_S = 5.0


def available_services() -> list[str]:
    root = importlib.util.find_spec("services")
    base = Path(next(iter(root.submodule_search_locations or []))) if root else Path()
    return [s for s in SERVICES if (base / s / "main.py").is_file()]


class Launcher:
    def __init__(self, settings: Settings, services: list[str] | None = None, out: object = None) -> None:
        self.s = settings
        # Those the settings do not call for are left out (the cache when off, Triton without a pool).
        self.names = wanted(settings, services if services is not None else available_services())
        self.kafka: EmbeddedKafka | None = None
        self.children: list[Child] = []
        self.bootstrap = settings.kafka_bootstrap or ""
        self.milvus: EmbeddedMilvus | None = None
        self.milvus_uri = settings.milvus_uri or ""
        self._milvus_bg: Background | None = None
        self.triton: EmbeddedTriton | None = None  # issue 6: the Triton pool's server
        self.triton_url = settings.triton_url or ""
        self.triton_metrics_url = settings.triton_metrics_url or ""
        self._triton_bg: Background | None = None
        self.redis: EmbeddedRedis | None = None  # Celery's broker unless SY_CELERY_BROKER is set
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

    def start_watchers(self) -> None:
        """Once every service is ready: /readyz reflects the canary, and the canary starts."""
        gateway = next((c for c in self.children if c.name == "gateway"), None)
        gateway_url = f"http://{self.s.health_host}:{gateway.port}" if gateway else ""
        self._http = httpx.AsyncClient(headers=admin_headers(self.s))  # /metrics is an admin path
        self.canary = stack_canary(self._child_settings(), self.names, gateway_url, self._http, self.say)
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
            self.say(f"kafka: {self.kafka.describe()}")
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
        self._milvus_bg = Background(self.milvus)
        self._milvus_bg.start()
        self.say(
            f"milvus: embedded Milvus standalone starting on {self.milvus_uri} (data {self.milvus.base_dir})"
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
        self._triton_bg = Background(self.triton)
        self._triton_bg.start()
        self.say(f"triton: embedded tritonserver starting on {self.triton_url} (log {self.triton.log_path})")

    # ---------------------------------------------------------------- services
    def _env_for(self, name: str, port: int) -> dict[str, str]:
        """The child's environment: wiring.ENV over the launcher's own."""
        stack = Stack(
            settings=self.s,
            name=name,
            port=port,
            bootstrap=self.bootstrap,
            embedded_kafka=self.kafka is not None,
            milvus_uri=self.milvus_uri,
            triton_url=self.triton_url,
            redis_url=self.redis.url if self.redis is not None else "",
            triton_metrics_url=self.triton_metrics_url,
            ports={**{c.name: c.port for c in self.children}, name: port},
            all_cpus=self.all_cpus,
            service_cpus=self.service_cpus,
        )
        return child_env(stack)

    def _port_for(self, name: str) -> int:
        port = DEFAULT_PORTS.get(name, 0)
        return port if port and port_free(port, self.s.health_host) else free_port(self.s.health_host)

    def _spawn(self, child: Child) -> None:
        cpus = None
        if child.name == "vllm_worker" and self.service_cpus is not None:
            # The engine it starts keeps these cores (every core, or those the services leave).
            cpus = engine_cpus(self.s.engine_cpus, self.all_cpus, self.service_cpus)
        proc = child.spawn(cpus)
        width = max(len(n) for n in self.names) if self.names else 8
        child.pump = asyncio.create_task(pump(child, proc, self._pump_pool, self.say, width))

    async def start_services(self) -> None:
        for name in self.names:
            port = self._port_for(name)
            child = Child(name, port, self._env_for(name, port), log_path=self.logs_dir / f"{name}.log")
            self.children.append(child)
            self._spawn(child)

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        await wait_ready(self.children, self.s.health_host, timeout_s)

    def write_endpoints(self) -> Endpoints:
        data = Endpoints(
            kafka=self.bootstrap,
            embedded_kafka=self.kafka is not None,
            kafka_pid=self.kafka.proc.pid if self.kafka is not None and self.kafka.proc else None,
            milvus=self.milvus_uri,
            embedded_milvus=self.milvus is not None,
            triton=self.triton_url,
            embedded_triton=self.triton is not None,
            redis=self.redis.url if self.redis is not None else "",
            launcher_pid=os.getpid(),
            launcher_url=self.admin_url,
            services={
                c.name: ServiceEndpoint(
                    url=f"http://{self.s.health_host}:{c.port}",
                    pid=c.proc.pid if c.proc else None,
                    exits=dict(c.exits),
                )
                for c in self.children
            },
            trace_file=str(self.s.var_dir / "run" / "spans.jsonl"),
        )
        path = endpoints_file(self.s)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data.model_dump(), indent=2))
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
            if self.redis is not None:
                self.redis.restart_if_exited(self.say)
            for what, bg in (("milvus", self._milvus_bg), ("triton", self._triton_bg)):
                if bg is not None and bg.died():
                    self.say(f"{what}: embedded server exited; restarting it on the same ports")
                    bg.start()
            for c in self.children:
                if not self._stopping.is_set() and (died := c.died()) is not None:
                    code, delay = died
                    self.say(f"{c.name} exited with code {code}; restarting in {delay:.1f}s")
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
        for server in (self.kafka, self.redis):
            if server is not None:
                server.stop()
        if self._triton_bg is not None:
            await self._triton_bg.stop()
        if self._milvus_bg is not None:  # bounded: SIGTERM, then SIGKILL (it ignores SIGTERM for long)
            await self._milvus_bg.stop()  # a start still unpacking or waiting gives up once killed
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
        launcher.redis = start_embedded_redis(settings, launcher.names, launcher.say)
        await launcher.start_milvus()
        await launcher.start_triton()
        await launcher.start_services()
        ready = asyncio.create_task(launcher.wait_ready(settings.ready_timeout_s))
        stopper = asyncio.create_task(stop_requested.wait())
        await asyncio.wait([ready, stopper], return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            ready.result()
            for line in launcher.write_endpoints().summary(keys_set="SY_API_KEYS" in os.environ):
                launcher.say(line)
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
