"""Reply partitions of gateway replicas (services/gateway/reply_lease.py) on a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from services.gateway.reply_lease import ReplyLease
from shared.runtime.bus import reply_partition
from shared.runtime.envelope import Envelope
from shared.runtime.stage import Emit, out_record
from tests.helpers.redis import redis_server


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest_asyncio.fixture
async def leases(redis_url: str) -> AsyncIterator[list[ReplyLease]]:
    made: list[ReplyLease] = []
    first = ReplyLease(redis_url, "gw-0", ttl_s=0.6)
    await first._r.flushdb()
    made.append(first)
    for i in (1, 2, 3, 4):
        made.append(ReplyLease(redis_url, f"gw-{i}", ttl_s=0.6))
    yield made
    for lease in made:
        await lease._r.aclose()


async def test_one_replica_reads_every_partition_and_each_new_one_takes_its_own(
    leases: list[ReplyLease],
) -> None:
    a, b, c = leases[:3]
    assert await a.choose("sy.responses", [0, 1, 2, 3]) == [0, 1, 2, 3]  # home 0, adopts the rest
    assert a.home == 0 and a.reply_to("sy.responses") == "sy.responses:0"
    assert await b.choose("sy.responses", [0, 1, 2, 3]) == [1]  # takes over one A adopted
    assert await c.choose("sy.responses", [0, 1, 2, 3]) == [2]
    assert await a.renew() == [0, 3]  # A lets go of what the others made their home
    # Each reply partition is read by exactly one replica.
    reading = [p for x in (a, b, c) for p in (x.reading or [])]
    assert sorted(reading) == [0, 1, 2, 3]


async def test_a_dead_replicas_partition_is_adopted_once_its_lease_runs_out(leases: list[ReplyLease]) -> None:
    a, b = leases[:2]
    await a.choose("sy.responses", [0, 1, 2, 3])
    await b.choose("sy.responses", [0, 1, 2, 3])
    assert await a.renew() == [0, 2, 3]
    # B dies without a word: for a lease's life its partition is nobody's to take...
    assert await a.renew() == [0, 2, 3]
    await asyncio.sleep(0.7)  # ...then A adopts it (and keeps its own, renewed since)
    assert await a.renew() == [0, 1, 2, 3]
    # B comes back under the same name: its home again.
    assert await b.join(4) == 1 and await b.renew() == [1]
    assert await a.renew() == [0, 2, 3]


async def test_a_clean_stop_hands_its_partitions_over_at_once(
    leases: list[ReplyLease], redis_url: str
) -> None:
    a, b = leases[:2]
    await a.choose("sy.responses", [0, 1, 2, 3])
    await b.choose("sy.responses", [0, 1, 2, 3])
    await a.close()
    assert await b.renew() == [0, 1, 2, 3]


async def test_replicas_beyond_the_partitions_read_everything_and_name_no_partition(
    leases: list[ReplyLease],
) -> None:
    for lease in leases[:2]:
        await lease.choose("sy.responses", [0, 1])
    extra = leases[2]
    assert await extra.choose("sy.responses", [0, 1]) == [0, 1]
    assert extra.home is None and extra.reply_to("sy.responses") == ""


async def test_a_renewal_loop_reports_changes(leases: list[ReplyLease]) -> None:
    a, b = leases[:2]
    await a.choose("sy.responses", [0, 1, 2, 3])
    stop, changed = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(a.run(stop, on_change=changed.set))
    await b.choose("sy.responses", [0, 1, 2, 3])
    await asyncio.wait_for(changed.wait(), timeout=3)
    assert a.reading == [0, 2, 3]
    stop.set()
    await task


@pytest.mark.parametrize(
    ("reply_to", "expected"),
    [
        ("sy.responses:2", 2),
        ("sy.responses:0", 0),
        ("", None),
        ("sy.responses", None),
        ("sy.stream:1", None),  # another topic
        ("sy.responses:-1", None),
        ("sy.responses:1e3", None),
        ("sy.responses:99999999999999", None),  # absurd: by key
        ("sy.responses: 1", None),
        ("x:sy.responses:1", None),
    ],
)
def test_reply_partition_reads_only_what_the_gateway_writes(reply_to: str, expected: int | None) -> None:
    assert reply_partition(reply_to, "sy.responses") == expected


def test_a_reply_goes_to_the_partition_reply_to_names_and_nothing_else_does() -> None:
    env = Envelope(request_id="r1", tenant="acme", reply_to="sy.responses:3")
    assert out_record(Emit("sy.responses", env), "sy.responses").partition == 3
    assert out_record(Emit("sy.routing", env), "sy.responses").partition is None  # not a reply
    assert (
        out_record(Emit("sy.responses", Envelope(request_id="r2", tenant="acme")), "sy.responses").partition
        is None
    )
    # An explicit partition (adapter affinity) wins.
    assert out_record(Emit("sy.responses", env, partition=1), "sy.responses").partition == 1


async def test_a_redis_that_is_down_at_start_means_reading_everything_until_it_answers() -> None:
    from shared.runtime.procs import free_port

    lease = ReplyLease(f"redis://127.0.0.1:{free_port()}/0", "gw-x", ttl_s=0.6)
    assert await lease.choose("sy.responses", [0, 1, 2]) == [0, 1, 2]
    assert lease.home is None and lease.reply_to("sy.responses") == ""
    await lease.close()
