"""soak: the whole stack as `make run` starts it (broker, Milvus, Triton, every service, cache on)
at a fixed request rate for 30 minutes (`--quick`: 4), to find slow leaks and rare errors.

Every 10 s the resident memory of each service is sampled — its whole process tree, so the vLLM
worker counts with its EngineCore — plus the broker, Milvus and Triton. Growth is the slope of a
least-squares line through a process's samples, in MiB per hour, twice: after the warm-up (the
last four fifths) and in the last third. A leak keeps its slope; warm-up growth (allocator
arenas, tokenizer and prefix caches, first shapes through the engine) fades, so the verdict is on
the last third. Pass: every request answered without error, no process restarted, and no
service's late slope above MAX_SLOPE_MIB_PER_H.

The broker and Milvus are stores: they grow with the data they keep (the embedded broker's memory
storage has no retention; Milvus keeps cache entries until their TTL). Their growth is reported
per request, not judged as a leak; production Kafka and Milvus keep data on disk with retention.

Hostile input (issue 32): beside the REST traffic, a plain aiokafka producer writes 5 % hostile
records straight to the ingest topic, as a foreign Kafka client would: random bytes, truncated
JSON, wrong types, a missing model, non-object JSON, and one in 50 with a 2 MB field. At the end
sy.dlq is read from the start (no group): each hostile record the broker accepted must be there
exactly once (matched by the sha256 of its value, DeadLetter.original_sha256), with a reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from shared.devstack.profiling import runner
from shared.devstack.profiling.scenarios import Scenario

from .harness.report import slope
from .harness.stack import overrides, sy_tiny, var_dir, whole_stack

# A leak of ~9 KiB per request at 2 requests/s; allocator noise on these services is far below.
MAX_SLOPE_MIB_PER_H = 64.0
SAMPLE_EVERY_S = 10.0

# Hostile records: their share of all records sent, and how long the DLQ may take to show them.
HOSTILE_SHARE = 0.05
HUGE_EVERY = 50  # one hostile record in 50 carries a 2 MB field
HUGE_FIELD_BYTES = 2 * 1024 * 1024
DLQ_WAIT_S = 180.0
DLQ_SETTLE_S = 15.0  # read on this long after the last one arrived: a repeat would show
TENANT = "local"  # the tenant of the stack's default key (sk-switchyard-local)
JSON_CT, PROTOBUF_CT = b"application/json", b"application/x-protobuf"
HOSTILE_CLASSES = (
    "random_bytes",
    "truncated_json",
    "wrong_types",
    "missing_model",
    "not_object",
    "huge_field",
)
_HUGE_PLACES = ("content", "metadata", "request_id", "model", "tenant")
_WRONG_TYPES: tuple[tuple[str, object], ...] = (
    ("kind", 12345),
    ("tenant", {"a": 1}),
    ("request", {"messages": "not-a-list"}),
    ("priority", "urgent"),
    ("deadline_unix_ms", "tomorrow"),
)


@dataclass(frozen=True)
class Hostile:
    """One hostile record as a foreign producer writes it to the ingest topic."""

    kind: str
    value: bytes
    content_type: bytes

    @property
    def sha256(self) -> str:
        """What the stage's dead letter carries as original_sha256 (the hash of the whole value)."""
        return hashlib.sha256(self.value).hexdigest()


def envelope(request_id: str, tenant: str = TENANT) -> dict[str, Any]:
    """A valid JSON envelope for the ingest topic (the README's format)."""
    return {
        "request_id": request_id,
        "tenant": tenant,
        "kind": "KIND_CHAT",
        "model": "sy-tiny",
        "request": {
            "messages": [{"role": "user", "content": f"Say hi ({request_id})"}],
            "sampling": {"max_tokens": 4, "temperature": 0},
        },
    }


def hostile_record(rng: random.Random, i: int, nonce: str = "soak", tenant: str = TENANT) -> Hostile:
    """The i-th hostile record: one in HUGE_EVERY has a 2 MB field, the rest rotate over the other
    classes. Every value is unique (its request id, or 16+ random bytes), so its sha256 names it."""
    rid = f"hostile-{nonce}-{i}"
    body = envelope(rid, tenant)
    if i % HUGE_EVERY == 0:
        big = "x" * HUGE_FIELD_BYTES
        place = _HUGE_PLACES[(i // HUGE_EVERY) % len(_HUGE_PLACES)]
        if place == "content":
            body["request"]["messages"][0]["content"] = big
        elif place == "metadata":
            body["metadata"] = {"note": big}
        else:
            body[place] = big
        # metadata keeps the id, so a record whose huge field is the request_id stays unique too.
        body.setdefault("metadata", {})["hostile"] = rid
        return Hostile("huge_field", json.dumps(body).encode(), JSON_CT)
    kind = HOSTILE_CLASSES[i % (len(HOSTILE_CLASSES) - 1)]
    if kind == "random_bytes":
        return Hostile(kind, rng.randbytes(rng.randint(16, 400)), rng.choice([JSON_CT, PROTOBUF_CT]))
    if kind == "truncated_json":
        raw = json.dumps(body).encode()
        keep_from = raw.index(rid.encode()) + len(rid)  # the cut keeps the id: values stay unique
        return Hostile(kind, raw[: rng.randint(keep_from, len(raw) - 1)], JSON_CT)
    if kind == "wrong_types":
        field, value = rng.choice(_WRONG_TYPES)
        body[field] = value
        return Hostile(kind, json.dumps(body).encode(), JSON_CT)
    if kind == "missing_model":
        body.pop("model")
        return Hostile(kind, json.dumps(body).encode(), JSON_CT)
    shape = rng.choice(["array", "string", "number_array"])
    value: object = {"array": [body], "string": f"hello {rid}", "number_array": [i, 1, 2, 3]}[shape]
    return Hostile("not_object", json.dumps(value).encode(), JSON_CT)


def dlq_verdict(sent: list[Hostile], refused: int, letters: list[tuple[str, bool]]) -> dict[str, Any]:
    """Each hostile record the broker accepted in the DLQ exactly once. `letters`: (original_sha256,
    has a reason) of every dead letter read; `refused`: hostile records the broker would not take
    (not in its log, so not expected in the DLQ)."""
    counts = Counter(sha for sha, _ in letters)
    want = {h.sha256: h.kind for h in sent}
    missing = Counter(kind for sha, kind in want.items() if counts[sha] == 0)
    repeated = Counter(kind for sha, kind in want.items() if counts[sha] > 1)
    no_reason = sum(1 for sha, ok in letters if sha in want and not ok)
    others = sum(n for sha, n in counts.items() if sha not in want)
    return {
        "sent": len(sent) + refused,
        "by_class": dict(sorted(Counter(h.kind for h in sent).items())),
        "refused_by_broker": refused,
        "dead_lettered_once": sum(1 for sha in want if counts[sha] == 1),
        "missing_from_dlq": dict(missing),
        "dead_lettered_more_than_once": dict(repeated),
        "without_reason": no_reason,
        "other_dead_letters": others,
        "passed": bool(want) and not missing and not repeated and not no_reason,
    }


async def produce_hostile(
    bootstrap: str, topic: str, rate_rps: float, duration_s: float, out: list[Hostile], refused: list[str]
) -> None:
    """Poisson arrivals of hostile records at rate_rps for duration_s, by a plain producer."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=16 << 20, acks="all")
    await producer.start()
    content, timing = random.Random(32), random.Random(33)
    t_end = time.monotonic() + duration_s
    i = 0
    try:
        while time.monotonic() < t_end:
            rec = hostile_record(content, i)
            i += 1
            try:
                await (await producer.send(topic, rec.value, headers=[("content-type", rec.content_type)]))
                out.append(rec)
            except KafkaError as exc:
                refused.append(f"{rec.kind}: {exc!r}"[:200])
            await asyncio.sleep(timing.expovariate(rate_rps))
    finally:
        await producer.stop()


async def read_dlq(bootstrap: str, topic: str, want: set[str]) -> list[tuple[str, bool]]:
    """Every dead letter in `topic` from the start, without a group: (original_sha256, has a reason).
    Reads until all of `want` showed (or DLQ_WAIT_S), then DLQ_SETTLE_S more for repeats."""
    from switchyard.v1.events_pb2 import DeadLetter

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=16 << 20,
    )
    await consumer.start()
    letters: list[tuple[str, bool]] = []
    seen: set[str] = set()
    deadline = time.monotonic() + DLQ_WAIT_S
    try:
        while time.monotonic() < deadline:
            for recs in (await consumer.getmany(timeout_ms=200)).values():
                for r in recs:
                    try:
                        d = DeadLetter.FromString(r.value or b"")
                    except Exception:  # not ours to judge here: counted as another dead letter
                        letters.append(("", False))
                        continue
                    letters.append((d.original_sha256, bool(d.reason and d.error_code)))
                    seen.add(d.original_sha256)
            if want <= seen:
                deadline = min(deadline, time.monotonic() + DLQ_SETTLE_S)
    finally:
        await consumer.stop()
    return letters


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (0 when it is gone)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def processes(endpoints: dict[str, Any]) -> dict[str, int]:
    """name -> pid of every process the launcher runs (services and embedded servers)."""
    named = {n: int(i["pid"]) for n, i in endpoints["services"].items() if i.get("pid")}
    if endpoints.get("kafka_pid"):
        named["broker"] = int(endpoints["kafka_pid"])
    known = set(named.values())
    try:
        children = psutil.Process(int(endpoints["launcher_pid"])).children()
    except psutil.Error:
        children = []
    for child in children:  # the embedded Milvus and Triton are the launcher's other children
        if child.pid in known:
            continue
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "milvus" in cmd:
            named["milvus"] = child.pid
        elif "tritonserver" in cmd:
            named["triton"] = child.pid
    return named


def slope_mib_per_h(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, bytes) in MiB/hour."""
    per_s = slope(points, min_points=3)
    return None if per_s is None else round(per_s * 3600 / 2**20, 2)


async def sample_rss(endpoints_path: Path, rows: list[dict[str, Any]], stop: asyncio.Event) -> None:
    t0 = time.monotonic()
    while not stop.is_set():
        try:
            ep = json.loads(endpoints_path.read_text())
            rows.append(
                {
                    "t": round(time.monotonic() - t0, 1),
                    "rss": {n: tree_rss(p) for n, p in processes(ep).items()},
                }
            )
        except (OSError, ValueError):
            pass
        try:
            await asyncio.wait_for(stop.wait(), timeout=SAMPLE_EVERY_S)
        except TimeoutError:
            pass


STORES = ("broker", "milvus")


def memory_summary(rows: list[dict[str, Any]], warmup_s: float) -> dict[str, dict[str, Any]]:
    names = sorted({n for r in rows for n in r["rss"]})
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        pts = [(r["t"], r["rss"][name]) for r in rows if r["rss"].get(name)]
        late = [p for p in pts if p[0] >= warmup_s]
        if not pts:
            continue
        last_third = [p for p in pts if p[0] >= pts[-1][0] * 2 / 3]
        out[name] = {
            "rss_start_mib": round(pts[0][1] / 2**20, 1),
            "rss_after_warmup_mib": round(late[0][1] / 2**20, 1) if late else None,
            "rss_end_mib": round(pts[-1][1] / 2**20, 1),
            "rss_max_mib": round(max(b for _, b in pts) / 2**20, 1),
            "slope_mib_per_h": slope_mib_per_h(late),
            "late_slope_mib_per_h": slope_mib_per_h(last_third),
        }
    return out


def verdict(
    memory: dict[str, dict[str, Any]], errors: dict[str, int], restarts: dict[str, Any], requests: int
) -> dict[str, Any]:
    services = {n: m for n, m in memory.items() if n not in STORES}
    late = {
        n: m["late_slope_mib_per_h"] for n, m in services.items() if m["late_slope_mib_per_h"] is not None
    }
    worst = max(late.items(), key=lambda kv: kv[1], default=(None, None))
    stores = {
        n: {
            "grew_mib": round(m["rss_end_mib"] - m["rss_start_mib"], 1),
            "kib_per_request": round((m["rss_end_mib"] - m["rss_start_mib"]) * 1024 / max(1, requests), 2),
        }
        for n, m in memory.items()
        if n in STORES
    }
    return {
        "worst_rss_slope": {"process": worst[0], "mib_per_h": worst[1]},
        "rss_slope_after_warmup_mib_per_h": {n: m["slope_mib_per_h"] for n, m in services.items()},
        "rss_slope_last_third_mib_per_h": late,
        "rss_end_mib": {n: m["rss_end_mib"] for n, m in memory.items()},
        "stores_data_growth": stores,
        "max_slope_mib_per_h": MAX_SLOPE_MIB_PER_H,
        "passed": not errors and not restarts and all(v <= MAX_SLOPE_MIB_PER_H for v in late.values()),
    }


def broker_growth(memory: dict[str, dict[str, Any]], valid: int, hostile: list[Hostile]) -> dict[str, Any]:
    """The embedded broker's RSS growth per 1,000 requests (valid REST plus hostile records), and
    per 1,000 valid ones after taking off the hostile bytes it was given (they stay in its log)."""
    m = memory.get("broker")
    if not m:
        return {}
    grew = m["rss_end_mib"] - m["rss_start_mib"]
    hostile_mib = sum(len(h.value) for h in hostile) / 2**20
    return {
        "grew_mib": round(grew, 1),
        "hostile_bytes_mib": round(hostile_mib, 1),
        "mib_per_1000_requests": round(grew * 1000 / max(1, valid + len(hostile)), 2),
        "mib_per_1000_valid_net_of_hostile_bytes": round((grew - hostile_mib) * 1000 / max(1, valid), 2),
    }


async def run(out: Path, quick: bool = False, duration_s: float | None = None) -> dict[str, Any]:
    duration = duration_s or (240.0 if quick else 1800.0)
    sc = Scenario(
        name="soak",
        mode="rate",
        rate_rps=2.0,
        duration_s=duration,
        max_tokens=(16, 48),
        cache_hit_ratio=0.3,
        stream=True,
    )
    rows: list[dict[str, Any]] = []
    stop = asyncio.Event()
    prefix = overrides().get("SY_TOPIC_PREFIX", "sy.")
    hostile: list[Hostile] = []
    refused: list[str] = []
    with whole_stack(sy_tiny(), var_dir(out, "soak-var")) as stack:
        kafka = stack.endpoints["kafka"]
        sampler = asyncio.create_task(sample_rss(stack.endpoints_path, rows, stop))
        hostile_rps = sc.rate_rps * HOSTILE_SHARE / (1 - HOSTILE_SHARE)
        producer = asyncio.create_task(
            produce_hostile(kafka, f"{prefix}requests", hostile_rps, duration, hostile, refused)
        )
        try:
            data = await runner.run(
                sc, stack.url.removesuffix("/v1"), {}, "sk-switchyard-local", progress=False
            )
            await producer
        finally:
            producer.cancel()
        stop.set()
        await sampler
        letters = await read_dlq(kafka, f"{prefix}dlq", {h.sha256 for h in hostile})
        stack.reread()
    reqs = data["requests"]
    errors: dict[str, int] = {}
    for r in reqs:
        if r["status"] != 200 or "error" in r:
            key = f"{r['status']} {str(r.get('error', ''))[:80]}".strip()
            errors[key] = errors.get(key, 0) + 1
    restarts = stack.restarts()
    memory = memory_summary(rows, warmup_s=duration / 5)
    e2e = sorted(r["e2e_ms"] for r in reqs if r["status"] == 200 and "error" not in r)
    dlq = dlq_verdict(hostile, len(refused), letters)
    judged = verdict(memory, errors, restarts, len(reqs))
    summary = {
        "duration_s": duration,
        "rate_rps": sc.rate_rps,
        "requests": len(reqs),
        "completed": len(e2e),
        "errors": sum(errors.values()),
        "restarts": restarts,
        "e2e_p50_ms": round(e2e[len(e2e) // 2], 1) if e2e else None,
        "e2e_p99_ms": round(e2e[min(len(e2e) - 1, int(0.99 * len(e2e)))], 1) if e2e else None,
        **judged,
        "no_valid_request_failed": not errors,
        "hostile": dlq,
        "broker_rss": broker_growth(memory, len(reqs), hostile),
        "memory_passed": judged["passed"],
        "passed": judged["passed"] and dlq["passed"],
    }
    return {
        "scenario": "soak",
        "load": sc.model_dump(),
        "hostile_share": HOSTILE_SHARE,
        "hostile_refused_by_broker": refused,
        "errors": errors,
        "memory": memory,
        "rss_samples": rows,
        "summary": summary,
    }
