"""Router pool choice over pool tables and heartbeat histories (no Kafka): capability, staleness,
SLO class, load balance, adapter residency, and the fail-over bookkeeping."""

from __future__ import annotations

from switchyard.v1.envelope_pb2 import AdapterRef, ChatMessage, MediaRef, Priority, Request
from switchyard.v1.events_pb2 import Heartbeat

from services.router.pending import PendingTable
from services.router.policy import PoolState, choose_pool
from services.router.workers import WorkerTable
from shared.runtime.config import PoolConfig
from shared.runtime.envelope import Envelope, Kind

GPU = PoolConfig(name="gpu", engine="vllm", device="gpu", models=["sy-tiny"], max_lora_rank=16, cost=4.0)
CPU = PoolConfig(name="cpu", engine="vllm", device="cpu", models=["sy-tiny"], max_lora_rank=8, cost=1.0)
EDGE = PoolConfig(name="edge", engine="triton", device="edge", models=["sy-tiny", "sy-tiny-bf16"], cost=0.5)
POOLS = [GPU, CPU, EDGE]


def req(model: str = "sy-tiny", priority: int = 0, adapter: str = "", rank: int = 0) -> Envelope:
    env = Envelope(
        request_id="r",
        tenant="t",
        kind=Kind.KIND_CHAT,
        model=model,
        priority=priority,
        request=Request(messages=[ChatMessage(role="user", content="hi")]),
    )
    if adapter:
        name, _, version = adapter.partition("@")
        env.adapter = adapter
        env.adapter_ref.CopyFrom(AdapterRef(name=name, version=int(version or 1), rank=rank))
    return env


def hb(
    pool: str, worker: str, in_flight: int = 0, max_in_flight: int = 4, adapters: tuple[str, ...] = ()
) -> Heartbeat:
    return Heartbeat(
        pool=pool,
        worker_id=worker,
        in_flight=in_flight,
        max_in_flight=max_in_flight,
        partitions=[0, 1],
        adapters=list(adapters),
    )


def state_with(*beats: tuple[float, Heartbeat], stale: float = 3.0) -> PoolState:
    table = WorkerTable(stale_after_s=stale)
    for t, beat in beats:
        table.update(beat, now=t)
    return PoolState(table)


def test_capability_model_modality_and_adapter_rank() -> None:
    st = state_with((100, hb("gpu", "g1")), (100, hb("cpu", "c1")), (100, hb("edge", "e1")))
    d = choose_pool(req("gpt-404"), POOLS, st, now=101)
    assert d.pool is None and d.http_status == 404 and "gpt-404" in d.reason
    assert choose_pool(req("sy-tiny-bf16"), POOLS, st, now=101).pool is EDGE  # only the edge pool has it
    image = req()
    image.media.append(MediaRef(modality="image"))
    d = choose_pool(image, POOLS, st, now=101)
    assert d.pool is None and "image" in d.reason
    assert (
        choose_pool(req(adapter="math@1", rank=8, priority=Priority.PRIORITY_BATCH), POOLS, st, now=101).pool
        is CPU
    )
    assert (
        choose_pool(req(adapter="big@1", rank=16, priority=Priority.PRIORITY_BATCH), POOLS, st, now=101).pool
        is GPU
    )
    d = choose_pool(req(adapter="huge@1", rank=64), POOLS, st, now=101)
    assert d.pool is None and "rank 64" in d.reason


def test_media_go_only_to_the_models_a_pool_names_for_them() -> None:
    """A pool serving a VLM beside text models (Triton: sy-vlm, sy-tiny) takes images for the VLM only."""
    mixed = PoolConfig(
        name="edge",
        engine="triton",
        device="edge",
        models=["sy-tiny", "sy-vlm"],
        modalities=["text", "image"],
        media_models=["sy-vlm"],
    )
    assert mixed.modalities_for("sy-vlm") == {"text", "image"} and mixed.modalities_for("sy-tiny") == {"text"}
    st = state_with((100, hb("cpu", "c1")), (100, hb("edge", "e1")))
    for model, pool in (("sy-vlm", mixed), ("sy-tiny", None)):
        image = req(model)
        image.media.append(MediaRef(modality="image"))
        d = choose_pool(image, [CPU, mixed], st, now=101)
        assert d.pool is pool, (model, d.reason)
    assert choose_pool(req("sy-tiny"), [mixed], st, now=101).pool is mixed  # text still goes there


def test_slo_class_interactive_fastest_batch_cheapest() -> None:
    st = state_with((100, hb("gpu", "g1")), (100, hb("cpu", "c1")), (100, hb("edge", "e1")))
    d = choose_pool(req(), POOLS, st, now=101)
    assert d.pool is GPU and d.reason.startswith("interactive: live pool, gpu")
    assert choose_pool(req(priority=Priority.PRIORITY_BATCH), POOLS, st, now=101).pool is EDGE
    assert choose_pool(req(priority=Priority.PRIORITY_ROLLOUT), POOLS, st, now=101).pool is EDGE
    # within a device class the measured TTFT decides
    cpu2 = PoolConfig(name="cpu2", engine="triton", device="cpu", models=["sy-tiny"])
    st2 = state_with((100, hb("cpu", "c1")), (100, hb("cpu2", "c2")))
    for _ in range(5):
        st2.observe("cpu", 30.0)
        st2.observe("cpu2", 12.0)
    assert choose_pool(req(), [CPU, cpu2], st2, now=101).pool is cpu2


def test_staleness_takes_a_pool_out_and_unknown_pools_wait_behind_live_ones() -> None:
    # heartbeat history: gpu beat at 100 and then went silent; cpu keeps beating
    st = state_with((100, hb("gpu", "g1")), (100, hb("cpu", "c1")), (104, hb("cpu", "c1")))
    assert choose_pool(req(), POOLS, st, now=102).pool is GPU  # still fresh
    d = choose_pool(req(), POOLS, st, now=104.5)
    assert d.pool is CPU and "down: gpu" in d.reason
    assert st.health("gpu", now=104.5) == "down" and st.health("edge", now=104.5) == "unknown"
    # only the never-seen pool serves it: it stays eligible (its workers may be starting)
    assert choose_pool(req("sy-tiny-bf16"), POOLS, st, now=104.5).pool is EDGE
    # every capable pool seen and silent: a request with a deadline gets a clear 503 naming how long
    st_dead = state_with((100, hb("edge", "e1")))
    sync = req("sy-tiny-bf16")
    sync.deadline_unix_ms = 1_900_000_000_000
    d = choose_pool(sync, POOLS, st_dead, now=110)
    assert d.pool is None and d.http_status == 503 and "edge (no heartbeat for 10.0s)" in d.reason
    # one without (async, batch, rollout) waits on the pool's topic for a restarted worker...
    d = choose_pool(req("sy-tiny-bf16"), POOLS, st_dead, now=110)
    assert d.pool is EDGE and "waits on edge (silent 10.0s)" in d.reason
    # ...but not on a pool gone longer than park_max_s, nor on one it fails over from
    assert choose_pool(req("sy-tiny-bf16"), POOLS, st_dead, now=110, park_max_s=5).pool is None
    assert choose_pool(req("sy-tiny-bf16"), POOLS, st_dead, frozenset({"edge"}), now=110).pool is None
    # a restarted worker brings the pool back
    st_dead.workers.update(hb("edge", "e2"), now=111)
    assert choose_pool(req("sy-tiny-bf16"), POOLS, st_dead, now=111.5).pool is EDGE


def test_load_spills_from_a_saturated_pool_and_balances_equal_pools() -> None:
    st = state_with((100, hb("gpu", "g1", in_flight=4)), (100, hb("cpu", "c1")), (100, hb("edge", "e1")))
    d = choose_pool(req(), POOLS, st, now=101)
    assert d.pool is CPU  # the fastest is full: the next fastest
    st_full = state_with(
        (100, hb("gpu", "g1", in_flight=4)), (100, hb("cpu", "c1", 4)), (100, hb("edge", "e1", 4))
    )
    d = choose_pool(req(), POOLS, st_full, now=101)
    assert d.pool is GPU and "saturated" in d.reason  # all full: still the best, it queues
    a = PoolConfig(name="a", engine="vllm", models=["m"])
    b = PoolConfig(name="b", engine="triton", models=["m"])
    st_ab = state_with((100, hb("a", "a1", in_flight=3)), (100, hb("b", "b1", in_flight=1)))
    assert choose_pool(req("m"), [a, b], st_ab, now=101).pool is b
    # load counts what the router sent since the heartbeat (two workers of pool b)
    st_ab.workers.update(hb("b", "b2", in_flight=3), now=100)
    assert choose_pool(req("m"), [a, b], st_ab, now=101).pool is b  # b: 4/8 < a: 3/4


def test_adapter_residency_breaks_ties_between_equal_pools() -> None:
    p1 = PoolConfig(name="p1", engine="vllm", device="cpu", models=["sy-tiny"], max_lora_rank=8)
    p2 = PoolConfig(name="p2", engine="vllm", device="cpu", models=["sy-tiny"], max_lora_rank=8)
    st = state_with((100, hb("p1", "w1")), (100, hb("p2", "w2", in_flight=1, adapters=("math@3",))))
    d = choose_pool(req(adapter="math@3", rank=8), [p1, p2], st, now=101)
    assert d.pool is p2 and "math@3 resident" in d.reason  # resident beats slightly lower load
    assert choose_pool(req(), [p1, p2], st, now=101).pool is p1  # base request: the less loaded


def test_pending_table_tracks_per_pool_bounded_and_expires() -> None:
    t = PendingTable(max_entries=3, ttl_s=10)
    for i, pool in enumerate(["a", "a", "b", "a"]):
        t.add("t", f"r{i}", pool, b"x", now=100 + i)
    assert len(t) == 3 and [r for (_, r), _ in t.of_pool("a")] == ["r1", "r3"]  # r0 evicted (oldest)
    assert t.done("t", "r1") and not t.done("t", "r1")
    t.add("t", "r3", "b", b"y", now=104, failovers=1)  # moved on fail-over
    assert [r for (_, r), _ in t.of_pool("b")] == ["r2", "r3"] and t.of_pool("b")[1][1].failovers == 1
    assert t.expire(now=113.5) == 1 and len(t) == 1


def test_pending_table_keeps_two_tenants_with_the_same_request_id_apart() -> None:
    """Rollout group ids (`ro-<rollout_id>:g<i>`) and Kafka producers' ids are client-chosen."""
    t = PendingTable(max_entries=10, ttl_s=10)
    t.add("tenant-a", "ro-x:g0", "a", b"env-a", now=100)
    t.add("tenant-b", "ro-x:g0", "a", b"env-b", now=101)
    assert len(t) == 2
    assert [(k, p.envelope) for k, p in t.of_pool("a")] == [
        (("tenant-a", "ro-x:g0"), b"env-a"),
        (("tenant-b", "ro-x:g0"), b"env-b"),
    ]
    # tenant-a's answer clears only tenant-a's entry: tenant-b's can still fail over.
    assert t.done("tenant-a", "ro-x:g0")
    assert [k for k, _ in t.of_pool("a")] == [("tenant-b", "ro-x:g0")]
    assert not t.done("tenant-a", "ro-x:g0")
    # The same tenant sending its id again (a fail-over, a redelivery) replaces its own entry.
    t.add("tenant-b", "ro-x:g0", "b", b"env-b2", now=102, failovers=1)
    assert len(t) == 1 and t.of_pool("b")[0][1].envelope == b"env-b2" and t.of_pool("a") == []


def test_pool_engine_knobs_pass_through_to_vllm() -> None:
    from services.vllm_worker.engine import pool_engine_knobs
    from shared.runtime.config import Settings

    pools = [
        PoolConfig(name="vllm", engine="vllm", models=["sy-tiny"], precision="bfloat16", cpu_offload_gb=2),
        PoolConfig(name="q", engine="vllm", models=["sy-tiny"], quantization="fp8"),
    ]
    assert pool_engine_knobs(Settings(pools=pools)) == {"dtype": "bfloat16", "cpu_offload_gb": 2}
    assert pool_engine_knobs(Settings(pools=pools, vllm_pool="q")) == {"quantization": "fp8"}
    assert pool_engine_knobs(Settings(pools=pools, vllm_pool="none")) == {}


async def test_stage_fails_over_what_a_down_pool_owes() -> None:
    """RouterStage (services/router/stage.py): a routed request is pending on its pool; once that
    pool's workers go silent, the failover pass sends it to another pool and moves it there."""
    import time

    from services.router.stage import RouterStage
    from shared.runtime.config import load_settings

    settings = load_settings(pools=[GPU, CPU])
    sent: list[object] = []

    async def send(rec: object) -> None:
        sent.append(rec)

    stage = RouterStage(settings, send)
    stage.workers.update(hb("gpu", "g1"))
    [emit] = await stage.handle(req())
    assert emit.topic == settings.topic(GPU.topic_suffix) and stage.pending.of_pool("gpu")
    stage.workers.update(hb("gpu", "g1"), now=time.monotonic() - 60)  # silent for a minute: down
    stage.workers.update(hb("cpu", "c1"))
    await stage.failover()
    assert [r.topic for r in sent] == [settings.topic(CPU.topic_suffix)]  # type: ignore[attr-defined]
    assert not stage.pending.of_pool("gpu") and stage.pending.of_pool("cpu")
