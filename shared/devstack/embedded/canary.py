"""An end-to-end canary for `switchyard up`: ready means flowing, not only "every process answers".

Every service's /readyz says its own part works; none of them sees a request cross the whole
pipeline. While the stack is idle the launcher sends one tiny, non-cacheable request through
the gateway's REST API and one JSON envelope straight onto the ingest topic (answered on
sy.responses), and its own /readyz turns false while either fails or is slower than
SY_CANARY_TIMEOUT_S. A round is skipped when the gateway forwarded other traffic since the last
one: real requests are already exercising the path, and the canary must not add to a load.

Dev tooling only: production runs no launcher (compose and Kubernetes start each service), and
alerts there come from the services' own metrics.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from shared.devstack.wiring import ENGINE_WORKERS
from shared.runtime.bus import client_kwargs, decode_record
from shared.runtime.config import Settings
from shared.runtime.embedded_broker import FetchWaitGuard
from shared.runtime.envelope import (
    CONTENT_TYPE_JSON,
    ChatMessage,
    Envelope,
    Kind,
    Rejected,
    Request,
    SamplingParams,
    to_json,
)
from shared.runtime.ingest_auth import ServiceSigner
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

CANARY_OK = Gauge("sy_canary_ok", "1 while the last canary round went through end to end, else 0")
CANARY_SECONDS = Histogram(
    "sy_canary_seconds",
    "End-to-end latency of a canary request that succeeded, by path (rest, kafka)",
    ["path"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
CANARY_LAST_SECONDS = Gauge(
    "sy_canary_last_seconds", "Latency of the last canary request (to its failure when it failed)", ["path"]
)
CANARY_ROUNDS = Counter(
    "sy_canary_rounds_total", "Canary rounds by outcome: ok, failed, skipped (other traffic)", ["outcome"]
)

Probe = Callable[[], Awaitable[None]]  # one request end to end; raises on failure
Traffic = Callable[[], Awaitable[float | None]]  # a counter that moves with traffic; None: unknown


class CanaryFailed(Exception):
    """A canary request that came back wrong (an error status or an error reply)."""


class RestProbe:
    """POST /v1/chat/completions on the gateway: max_tokens 1, temperature 1 and a unique prompt,
    so the cache can neither answer it nor keep it."""

    def __init__(self, http: httpx.AsyncClient, gateway_url: str, api_key: str, model: str) -> None:
        self.http, self.url, self.api_key, self.model = http, gateway_url.rstrip("/"), api_key, model

    async def __call__(self) -> None:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": f"canary {uuid.uuid4().hex}"}],
            "max_tokens": 1,
            "temperature": 1,
        }
        r = await self.http.post(
            f"{self.url}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=None,  # the round's timeout bounds it
        )
        if r.status_code != 200:
            raise CanaryFailed(f"HTTP {r.status_code}: {r.text[:200]}")


class KafkaProbe:
    """One JSON envelope produced to sy.requests, as any Kafka producer would, and its reply read
    from sy.responses (JSON, as a JSON request's reply is; matched by request_id). The reader is positioned at the end
    before the record goes out; it lives for one round, so an idle stack has no extra poller."""

    def __init__(self, settings: Settings, tenant: str, model: str, timeout_s: float) -> None:
        self.s, self.tenant, self.model, self.timeout_s = settings, tenant, model, timeout_s

    def envelope(self, request_id: str) -> Envelope:
        return Envelope(
            request_id=request_id,
            tenant=self.tenant,
            kind=Kind.KIND_CHAT,
            model=self.model,
            # Past its deadline the pipeline drops it: a stuck stack's canaries don't pile up.
            deadline_unix_ms=int((time.time() + self.timeout_s) * 1000),
            request=Request(
                messages=[ChatMessage(role="user", content=f"canary {request_id}")],
                sampling=SamplingParams(max_tokens=1, temperature=1.0),
            ),
        )

    async def __call__(self) -> None:
        rid = f"canary-{uuid.uuid4().hex}"
        responses = self.s.topic("responses")
        consumer = AIOKafkaConsumer(
            **client_kwargs(self.s),  # type: ignore[arg-type]
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=self.s.kafka_fetch_max_wait_ms,
        )
        producer = AIOKafkaProducer(**client_kwargs(self.s), acks="all", enable_idempotence=False)  # type: ignore[arg-type]
        try:
            await producer.start()
            await consumer.start()
            tps = [TopicPartition(responses, p) for p in sorted(await producer.partitions_for(responses))]
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:  # resolve the end now, before the request can be answered
                await consumer.position(tp)
            value = to_json(self.envelope(rid)).encode()
            await producer.send_and_wait(
                self.s.topic("requests"),
                value,
                key=rid.encode(),
                headers=[("content-type", CONTENT_TYPE_JSON.encode()), ServiceSigner(self.s).header(value)],
            )
            guard = FetchWaitGuard(consumer, "canary")
            key = rid.encode()
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                guard.observe(bool(batch))
                for records in batch.values():
                    for rec in records:
                        if rec.key is not None and rec.key != key:
                            continue
                        try:
                            env = decode_record(rec)
                        except Rejected:
                            continue
                        if env.request_id != rid:
                            continue
                        if env.HasField("error") and env.error.code:
                            raise CanaryFailed(f"error reply {env.error.code}: {env.error.message[:200]}")
                        return
        finally:
            await producer.stop()
            await consumer.stop()


class GatewayTraffic:
    """Records the gateway has produced (`sy_produced_total` on its /metrics): every request it
    forwards produces one, so a change since the last round means someone else used the stack."""

    def __init__(self, http: httpx.AsyncClient, metrics_url: str) -> None:
        self.http, self.metrics_url = http, metrics_url

    async def __call__(self) -> float | None:
        try:
            r = await self.http.get(self.metrics_url, timeout=5.0)
            r.raise_for_status()
        except httpx.HTTPError:
            return None  # unknown: run the round, which will say what is wrong
        return sum(
            sample.value
            for family in text_string_to_metric_families(r.text)
            for sample in family.samples
            if sample.name == "sy_produced_total"
        )


class Canary:
    """Rounds of probes, their verdict (`ready`) and the console lines when it changes.

    Not ready until the first round has passed; after that, the last round that ran decides.
    """

    def __init__(
        self,
        probes: Mapping[str, Probe],
        *,
        interval_s: float,
        timeout_s: float,
        traffic: Traffic | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        self.probes = dict(probes)
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.traffic = traffic
        self.say = say
        self.ok: bool | None = None  # None: no round has run yet
        self.failures: dict[str, str] = {}
        self.latency_s: dict[str, float] = {}
        self._seen: float | None = None  # the traffic counter after our last round
        CANARY_OK.set(0)

    def ready(self) -> bool:
        """The launcher's /readyz check `canary`."""
        return self.ok is True

    async def _probe(self, path: str, probe: Probe) -> str | None:
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(probe(), timeout=self.timeout_s)
        except TimeoutError:
            failure: str | None = f"no answer within {self.timeout_s:g}s (SY_CANARY_TIMEOUT_S)"
        except Exception as exc:  # noqa: BLE001 - any failure of the path is the verdict
            failure = str(exc) or type(exc).__name__
        else:
            failure = None
        elapsed = time.monotonic() - t0
        self.latency_s[path] = elapsed
        CANARY_LAST_SECONDS.labels(path).set(elapsed)
        if failure is None:
            CANARY_SECONDS.labels(path).observe(elapsed)
        return failure

    async def round(self) -> bool | None:
        """Run every probe once (together); returns the verdict, or None when skipped for traffic."""
        if self.traffic is not None and self._seen is not None:
            now = await self.traffic()
            if now is not None and now != self._seen:
                self._seen = now
                CANARY_ROUNDS.labels("skipped").inc()
                return None
        names = list(self.probes)
        results = await asyncio.gather(*(self._probe(n, self.probes[n]) for n in names))
        failures = {n: f for n, f in zip(names, results, strict=True) if f is not None}
        self._record(failures)
        if self.traffic is not None:
            self._seen = await self.traffic()  # after our own requests: they are not "other traffic"
        return not failures

    def _record(self, failures: dict[str, str]) -> None:
        ok = not failures
        was, self.ok, self.failures = self.ok, ok, failures
        CANARY_OK.set(1 if ok else 0)
        CANARY_ROUNDS.labels("ok" if ok else "failed").inc()
        took = ", ".join(f"{n} {self.latency_s[n] * 1000:.0f} ms" for n in self.probes)
        if not ok and was is not False:
            why = "; ".join(f"{n}: {f}" for n, f in failures.items())
            self.say(f"canary: FAILED ({why}); the launcher's /readyz is false until it passes")
            log.warning("canary failed", failures=failures)
        elif ok and was is False:
            self.say(f"canary: recovered ({took})")
            log.info("canary recovered", latency_s=self.latency_s)
        elif ok and was is None:
            self.say(
                f"canary: ok ({took}); again every {self.interval_s:g}s while idle (SY_CANARY_INTERVAL_S)"
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds until `stop` is set: the first at once, then every interval."""
        while not stop.is_set():
            await self.round()
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.interval_s)
            except TimeoutError:
                pass


def stack_canary(
    settings: Settings,
    names: list[str],
    gateway_url: str,
    http: httpx.AsyncClient,
    say: Callable[[str], None],
) -> Canary | None:
    """The canary over the paths a stack of `names` can answer: REST through the gateway (at
    `gateway_url`, "" when none runs), and a raw record through preprocess; none without the
    router and a worker (a `--services` subset). `settings` name the broker the stack uses;
    `http` carries the admin headers (/metrics is an admin path)."""
    # The first model of the first pool whose worker this stack starts.
    model = next((p.models[0] for p in settings.pools if ENGINE_WORKERS.get(p.engine) in names), None)
    if settings.canary_interval_s <= 0 or model is None or "router" not in names:
        return None
    api_key, tenant = next(iter(settings.api_keys.items()), ("", "local"))
    probes: dict[str, Probe] = {}
    if gateway_url and api_key:
        probes["rest"] = RestProbe(http, gateway_url, api_key, model)
    if "preprocess" in names:
        probes["kafka"] = KafkaProbe(settings, tenant, model, settings.canary_timeout_s)
    if not probes:
        return None
    return Canary(
        probes,
        interval_s=settings.canary_interval_s,
        timeout_s=settings.canary_timeout_s,
        traffic=GatewayTraffic(http, f"{gateway_url}/metrics") if gateway_url else None,
        say=say,
    )
