"""Adapter refs, the worker's adapter disk cache, preprocess pinning and router affinity (no engine, no Kafka)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from switchyard.v1.envelope_pb2 import AdapterRef
from switchyard.v1.events_pb2 import Heartbeat

from services.preprocess.adapters import AdapterPinner
from services.router.workers import WorkerTable, affinity_partition, spread_partition
from services.vllm_worker.adapters import AdapterCache, lora_id
from shared.adapters.refs import parse_ref
from shared.runtime.envelope import Envelope, Rejected

WEIGHTS = b"weights-v1" * 100
SHA = hashlib.sha256(WEIGHTS).hexdigest()


def test_parse_ref() -> None:
    assert parse_ref("math") == ("math", None, "latest")
    assert parse_ref("math@3") == ("math", 3, None)
    assert parse_ref("math@prod") == ("math", None, "prod")
    for bad in ("../etc", "Math", "a@", "a@0", "a@b/c", "", "x\x00y"):
        with pytest.raises(ValueError):
            parse_ref(bad)


def test_lora_ids_are_stable_positive_and_distinct() -> None:
    ids = {lora_id(f"a{i}", v) for i in range(200) for v in (1, 2)}
    assert len(ids) == 400 and all(0 < i < 2**31 for i in ids)
    assert lora_id("math", 3) == lora_id("math", 3)


class FakeRegistry:
    def __init__(self, payload: bytes = WEIGHTS, delay: float = 0.05) -> None:
        self.calls = 0
        self.payload, self.delay = payload, delay

    async def __call__(self, ref: AdapterRef, dest: Path) -> None:
        self.calls += 1
        await asyncio.sleep(self.delay)
        (dest / "adapter_model.safetensors").write_bytes(self.payload)
        (dest / "adapter_config.json").write_text("{}")


def ref(name: str = "math", version: int = 1, sha: str = SHA) -> AdapterRef:
    return AdapterRef(name=name, version=version, sha256=sha, owner="acme", rank=8)


async def test_concurrent_requests_for_one_version_download_once(tmp_path: Path) -> None:
    fetch = FakeRegistry()
    cache = AdapterCache(tmp_path, 10**6, fetch)
    results = await asyncio.gather(*(cache.acquire(ref()) for _ in range(8)))
    assert fetch.calls == 1
    assert sum(downloaded for _, downloaded in results) == 1
    assert len({e.path for e, _ in results}) == 1
    assert (results[0][0].path / "adapter_model.safetensors").read_bytes() == WEIGHTS
    for e, _ in results:
        cache.release(e)
    again, downloaded = await cache.acquire(ref())
    assert not downloaded and fetch.calls == 1


async def test_sha256_mismatch_refuses_and_leaves_nothing(tmp_path: Path) -> None:
    cache = AdapterCache(tmp_path, 10**6, FakeRegistry(payload=b"tampered"))
    with pytest.raises(ValueError, match="sha256"):
        await cache.acquire(ref())
    assert cache.resident() == []
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


async def test_lru_bound_evicts_idle_least_recent(tmp_path: Path) -> None:
    fetch = FakeRegistry(delay=0)
    one = len(WEIGHTS) + 2 + 60  # weights + "{}" + marker, roughly
    cache = AdapterCache(tmp_path, int(one * 2.5), fetch)
    held, _ = await cache.acquire(ref("a"))  # in use: never evicted
    for name in ("b", "c", "d"):
        e, _ = await cache.acquire(ref(name))
        cache.release(e)
        await asyncio.sleep(0.01)
    assert "a@1" in cache.resident()
    assert cache.used_bytes <= cache.max_bytes
    assert "d@1" in cache.resident() and "b@1" not in cache.resident()
    cache.release(held)


async def test_restart_adopts_complete_versions_and_drops_partial(tmp_path: Path) -> None:
    cache = AdapterCache(tmp_path, 10**6, FakeRegistry(delay=0))
    e, _ = await cache.acquire(ref())
    cache.release(e)
    partial = tmp_path / "other" / "v1"
    partial.mkdir(parents=True)
    (partial / "adapter_model.safetensors").write_bytes(b"half")
    again = AdapterCache(tmp_path, 10**6, FakeRegistry(delay=0))
    assert again.resident() == ["math@1"] and not partial.exists()
    assert again.evict("math", 1) and again.resident() == []


def manifest(base: str = "sy-tiny") -> dict:
    return {"name": "math", "version": 4, "sha256": SHA, "owner": "acme", "rank": 8, "base_model": base}


async def test_pinner_resolves_model_named_adapter_once() -> None:
    asked: list[tuple[str, str]] = []

    async def resolve(tenant: str, r: str) -> dict | None:
        asked.append((tenant, r))
        return manifest() if r.startswith("math") else None

    pin = AdapterPinner({"sy-tiny"}, resolve)
    base = Envelope(request_id="r0", tenant="acme", model="sy-tiny")
    await pin.pin(base)
    assert not base.adapter and not asked  # base model: no registry call
    env = Envelope(request_id="r1", tenant="acme", model="math@prod")
    await pin.pin(env)
    assert (env.model, env.adapter) == ("sy-tiny", "math@prod")
    assert (env.adapter_ref.name, env.adapter_ref.version, env.adapter_ref.requested) == (
        "math",
        4,
        "math@prod",
    )
    assert any(t.stage == "adapter_resolve" for t in env.timings)
    await pin.pin(env)  # already pinned: resolved again, by exact version, as the record's tenant
    assert asked == [("acme", "math@prod"), ("acme", "math@4")]
    assert (env.adapter_ref.version, env.adapter_ref.requested) == (4, "math@prod")
    with pytest.raises(Rejected) as err:
        await pin.pin(Envelope(request_id="r2", tenant="acme", model="nope"))
    assert err.value.http_status == 404 and err.value.code == "model_not_found"
    with pytest.raises(Rejected) as err:
        await pin.pin(Envelope(request_id="r3", tenant="acme", model="sy-tiny", adapter="nope@2"))
    assert err.value.http_status == 404 and err.value.code == "adapter_not_found"
    with pytest.raises(Rejected) as err:
        await pin.pin(Envelope(request_id="r4", tenant="acme", model="other-base", adapter="math"))
    assert err.value.http_status == 400 and "base model" in err.value.reason
    with pytest.raises(Rejected) as err:
        await pin.pin(Envelope(request_id="r5", tenant="acme", model="sy-tiny", adapter="../x"))
    assert err.value.http_status == 400


async def test_a_pinned_ref_from_outside_is_resolved_again_as_the_records_tenant() -> None:
    """Any producer can write a pinned adapter_ref (issue 33): naming another tenant's private
    adapter, or a forged owner and sha256. Preprocess trusts none of it."""
    asked: list[tuple[str, str]] = []

    async def resolve(tenant: str, r: str) -> dict | None:
        asked.append((tenant, r))
        return manifest() if tenant == "acme" and r.startswith("math") else None  # private to acme

    pin = AdapterPinner({"sy-tiny"}, resolve)
    forged = AdapterRef(name="math", version=4, owner="globex", sha256="0" * 64, requested="math@4")
    stolen = Envelope(request_id="r1", tenant="globex", model="sy-tiny", adapter_ref=forged)
    with pytest.raises(Rejected) as err:  # no `adapter` field: the ref alone is not ignored
        await pin.pin(stolen)
    assert err.value.code == "adapter_not_found" and err.value.http_status == 404
    assert asked == [("globex", "math@4")]
    own = Envelope(request_id="r2", tenant="acme", model="sy-tiny", adapter="math", adapter_ref=forged)
    await pin.pin(own)
    assert (own.adapter_ref.owner, own.adapter_ref.sha256) == (
        "acme",
        SHA,
    )  # the registry's, not the record's
    wrong_base = Envelope(request_id="r3", tenant="acme", model="other", adapter_ref=forged)
    with pytest.raises(Rejected) as err:
        await pin.pin(wrong_base)
    assert err.value.http_status == 400 and "base model" in err.value.reason
    with pytest.raises(Rejected) as err:
        bad = AdapterRef(name="../etc", version=1)
        await pin.pin(Envelope(request_id="r4", tenant="acme", model="sy-tiny", adapter_ref=bad))
    assert err.value.http_status == 400


def hb(worker: str, adapters: list[str], partitions: list[int], in_flight: int = 0) -> Heartbeat:
    return Heartbeat(
        pool="vllm",
        worker_id=worker,
        adapters=adapters,
        partitions=partitions,
        in_flight=in_flight,
        max_in_flight=4,
    )


def test_affinity_prefers_a_live_unsaturated_worker_holding_the_adapter() -> None:
    table = WorkerTable(stale_after_s=6)
    table.update(hb("w1", ["math@1"], [0, 1]), now=100)
    table.update(hb("w2", ["code@2"], [2, 3]), now=100)
    part, why = affinity_partition(table, "vllm", "code@2", "sy-tiny:code", now=101)
    assert part in (2, 3) and "resident on w2" in why
    assert affinity_partition(table, "vllm", "code@2", "sy-tiny:code", now=101)[0] == part  # stable
    assert affinity_partition(table, "vllm", "new@1", "sy-tiny:new", now=101) == (None, "hash")
    assert affinity_partition(table, "vllm", "", "sy-tiny", now=101) == (None, "hash")
    assert affinity_partition(table, "vllm", "code@2", "k", now=120)[0] is None  # heartbeats are stale


def test_a_burst_spills_from_a_saturated_holder_to_the_least_loaded_worker() -> None:
    table = WorkerTable(stale_after_s=6)
    table.update(hb("w1", [], [0, 1]), now=100)
    table.update(hb("w2", ["code@2"], [2, 3], in_flight=2), now=100)
    # max_in_flight 4: two more fit on w2 (counting what the router sent since the heartbeat)
    parts = [affinity_partition(table, "vllm", "code@2", "k", now=101) for _ in range(4)]
    assert [p in (2, 3) for p, _ in parts] == [True, True, False, False]
    assert "spill" in parts[2][1]
    table.update(hb("w1", [], [0, 1], in_flight=4), now=102)
    table.update(hb("w2", ["code@2"], [2, 3], in_flight=4), now=102)
    assert affinity_partition(table, "vllm", "code@2", "k", now=102) == (None, "hash")  # all saturated


def test_base_requests_spread_over_live_workers() -> None:
    table = WorkerTable(stale_after_s=6)
    assert spread_partition(table, "vllm", now=100) is None  # no heartbeats yet: hash by request id
    table.update(hb("w1", [], [0, 1]), now=100)
    table.update(hb("w2", [], [2, 3]), now=100)
    parts = [spread_partition(table, "vllm", now=101) for _ in range(8)]
    assert sum(p in (0, 1) for p in parts) == 4 and sum(p in (2, 3) for p in parts) == 4
