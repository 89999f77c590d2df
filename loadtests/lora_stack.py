"""lora-scaling's stack: `switchyard up` with LoRA on, plus a second vLLM worker started beside it
in the same consumer group, the registry the adapters are uploaded to, and the heartbeats that show
which worker owns which partitions and holds which adapters."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from shared.runtime.procs import child_setup, free_port, kill_group, stop_process

from .harness.stack import ROOT, SINGLE_POOL, gateway_url, stack_env, start_stack, stop_stack

API_KEY = "sk-bench"
TOPIC_PREFIX = "sy."


class Heartbeats:
    """Follows sy.heartbeats: which worker owns which partitions and holds which adapters."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.latest: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer

        self._consumer = AIOKafkaConsumer(
            TOPIC_PREFIX + "heartbeats", bootstrap_servers=self.bootstrap, auto_offset_reset="latest"
        )
        await self._consumer.start()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        from switchyard.v1.events_pb2 import Heartbeat

        async for rec in self._consumer:
            hb = Heartbeat.FromString(rec.value)
            self.latest[hb.worker_id] = {
                "seen": time.monotonic(),
                "partitions": sorted(hb.partitions),
                "adapters": list(hb.adapters),
            }

    def live(self, max_age_s: float = 5.0) -> dict[str, Any]:
        now = time.monotonic()
        return {w: v for w, v in self.latest.items() if now - v["seen"] <= max_age_s}

    async def wait_split(self, workers: int, partitions: int, timeout_s: float = 90) -> bool:
        """True once `workers` live workers own disjoint partition sets covering every partition."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            live = self.live()
            owned = [p for v in live.values() for p in v["partitions"]]
            if (
                len(live) >= workers
                and all(v["partitions"] for v in live.values())
                and sorted(owned) == list(range(partitions))
            ):
                return True
            await asyncio.sleep(0.5)
        return False

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(Exception):
            await self._consumer.stop()


class Stack:
    """`shared.devstack.cli up` plus a second vLLM worker started here (the launcher runs one per service)."""

    def __init__(self, var_dir: Path, model_dir: Path, workers: int, **extra: str) -> None:
        self.var_dir = var_dir
        self.workers = workers
        self.model_dir = model_dir
        settings = {
            "SY_VLLM_ENABLE_LORA": "true",
            "SY_DRAIN_TIMEOUT_S": "5",
            "SY_CACHE_ENABLED": "false",  # prompts repeat across workloads: measure serving, not the cache
            "SY_API_KEYS": json.dumps({API_KEY: "bench"}),
            "SY_POOLS": json.dumps(SINGLE_POOL),
        }
        if workers > 1:  # partitions for the workers to split (the embedded broker's default is 1)
            settings["SY_TOPIC_PARTITIONS"] = "4"
        self.env = stack_env(model_dir, var_dir, **{**settings, **extra})
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra: list[subprocess.Popen[bytes]] = []
        self.endpoints: dict[str, Any] = {}
        self.heartbeats: Heartbeats | None = None
        self.split_ok = False

    @property
    def gateway(self) -> str:
        return gateway_url(self.endpoints)

    @property
    def registry(self) -> str:
        return self.endpoints["services"]["registry"]["url"]

    async def start(self) -> None:
        # A fresh state dir per run: a previous run's adapter caches would make the cold load warm.
        shutil.rmtree(self.var_dir, ignore_errors=True)
        self.var_dir.mkdir(parents=True, exist_ok=True)
        # The same environment the extra workers get (one broker port, one set of settings).
        extra = {k: v for k, v in self.env.items() if k.startswith("SY_")}
        self.proc, self.endpoints = await asyncio.to_thread(
            start_stack, self.model_dir, self.var_dir, log_name="pipeline.log", ready_timeout_s=300, **extra
        )
        self.heartbeats = Heartbeats(self.endpoints["kafka"])
        await self.heartbeats.start()
        for i in range(2, self.workers + 1):
            await self._start_worker(i)
        partitions = int(self.env.get("SY_TOPIC_PARTITIONS", "4"))
        self.split_ok = await self.heartbeats.wait_split(self.workers, partitions)

    async def _start_worker(self, i: int) -> None:
        port = free_port()
        env = dict(self.env)
        env.update(
            SY_ENV="dev",
            SY_KAFKA_BOOTSTRAP=self.endpoints["kafka"],
            SY_HEALTH_PORT=str(port),
            SY_INSTANCE_ID=f"vllm_worker-{i}",
            SY_TRACE_FILE=self.endpoints["trace_file"],
            SY_REGISTRY_URL=self.registry,
            SY_ADAPTER_CACHE_DIR=str(self.var_dir / f"adapter-cache-{i}"),
            # as the launcher sets them with the embedded broker
            SY_KAFKA_SESSION_TIMEOUT_MS="3000",
            SY_KAFKA_HEARTBEAT_INTERVAL_MS="500",
        )
        env.pop("SY_KAFKA_PORT", None)
        log = open(self.var_dir / f"vllm_worker-{i}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.vllm_worker.main"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=child_setup(),
        )
        self.extra.append(proc)
        deadline = time.monotonic() + 300
        async with httpx.AsyncClient(timeout=1) as http:
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((self.var_dir / f"vllm_worker-{i}.log").read_text()[-3000:])
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self.heartbeats is not None:
            await self.heartbeats.stop()
        for p in self.extra:
            await asyncio.to_thread(stop_process, p, 30)
        if self.proc is not None:
            await asyncio.to_thread(stop_stack, self.proc, 120)
        # Each service has its own process group; clear what is left of them (vLLM's EngineCore
        # has been seen outliving its worker), so later runs do not share the CPUs with it.
        pids = [s.get("pid") for s in self.endpoints.get("services", {}).values()]
        for pid in [*pids, *(p.pid for p in self.extra)]:
            if pid:
                kill_group(int(pid))

    async def upload(self, name: str, adapter_dir: Path) -> None:
        files = {
            "adapter_model": (
                "adapter_model.safetensors",
                (adapter_dir / "adapter_model.safetensors").read_bytes(),
            ),
            "adapter_config": ("adapter_config.json", (adapter_dir / "adapter_config.json").read_bytes()),
        }
        async with httpx.AsyncClient(timeout=60) as http:
            r = await http.post(
                self.registry + "/v1/adapters",
                data={"name": name},
                files=files,
                headers={"Authorization": f"Bearer {API_KEY}"},
            )
        if r.status_code != 201:
            raise RuntimeError(f"upload {name}: {r.status_code} {r.text}")

    def resident(self) -> dict[str, int]:
        """Adapters (besides the zero adapter) each live worker reports resident."""
        assert self.heartbeats is not None
        return {w: len(v["adapters"]) for w, v in sorted(self.heartbeats.live().items())}
