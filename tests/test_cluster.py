"""Redis Cluster: every primitive on many slots, resharding and failover under contention.

The behaviour suites (locks, semaphores, latches...) also run on the cluster through the
``url`` fixture; this file adds what only a cluster has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from typing import Any

import pytest
import redis

import syncprims
from syncprims._transport.cluster import key_slot
from syncprims.bench.history import Hold, analyse
from tests.harness import Face, raw_command, raw_redis
from tests.server_groups import RedisClusterSet, _cli

pytestmark = [pytest.mark.real, pytest.mark.cluster]

NAMES = ["plain", "{tag}:x", "a{b}c", "ünïcode:ключ"]


async def test_every_primitive_on_many_slots(face: Face, redis_cluster: RedisClusterSet) -> None:
    client = await face.connect(redis_cluster.url)
    a = face.actor()
    names = [*NAMES, *(f"spread:{uuid.uuid4().hex}" for _ in range(20))]
    assert len({key_slot(n) for n in names}) > 10
    for base in names:
        name = f"{base}:{uuid.uuid4().hex[:6]}" if "{" not in base else base + uuid.uuid4().hex[:6]
        for lock in (
            client.get_lock(name),
            client.get_fair_lock(name + ":f"),
            client.get_read_write_lock(name + ":rw").write_lock(),
            client.get_read_write_lock(name + ":rw2").read_lock(),
            client.get_fenced_lock(name + ":fe"),
        ):
            assert await a(lock.try_lock, 1, 10)
            assert await a(lock.expire, 20)
            await a(lock.unlock)
            assert not await a(lock.is_locked)
        sem = client.get_semaphore(name + ":s")
        assert await a(sem.try_set_permits, 1)
        assert await a(sem.try_acquire)
        await a(sem.release)
        pes = client.get_permit_expirable_semaphore(name + ":p")
        await a(pes.try_set_permits, 1)
        permit = await a(pes.acquire, lease_time=5)
        await a(pes.release, permit)
        latch = client.get_count_down_latch(name + ":l")
        await a(latch.try_set_count, 1)
        await a(latch.count_down)
        assert await a(latch.wait, 1)
        assert await a(latch.delete) is False


@pytest.mark.parametrize("bad", ["{}weird", "a{b", "x}{"])
async def test_names_without_a_real_hash_tag_are_refused(
    face: Face, redis_cluster: RedisClusterSet, bad: str
) -> None:
    client = await face.connect(redis_cluster.url)
    with pytest.raises(ValueError, match="hash tag"):
        client.get_lock(bad)


async def test_a_waiter_is_woken_on_a_tagged_latch(
    face: Face, redis_cluster: RedisClusterSet
) -> None:
    # The latch channel of a tagged name lies in another slot: classic pub/sub carries it.
    client = await face.connect(redis_cluster.url)
    latch = client.get_count_down_latch("{grp}:" + uuid.uuid4().hex)
    a = face.actor()
    await a(latch.try_set_count, 1)
    waiter = asyncio.ensure_future(face.actor()(latch.wait, 20))
    await asyncio.sleep(0.3)
    opened = time.monotonic()
    await a(latch.count_down)
    assert await asyncio.wait_for(waiter, 10)
    assert time.monotonic() - opened < 2  # by message, not by the 5 s re-check


def _contend(url: str, name: str, seconds: float, event: Any = None) -> list[Hold]:
    """4 threads contend on ``name`` for ``seconds``; each hold is logged. A failure names
    what the library logged at WARNING or above meanwhile (the cause of a rare flake)."""
    holds: list[Hold] = []
    errors: list[tuple[float, BaseException]] = []
    mutex = threading.Lock()
    logged = _Records()
    logger = logging.getLogger("syncprims")
    logger.addHandler(logged)
    with contextlib.ExitStack() as stack, syncprims.connect(url, retry_attempts=6) as client:
        stack.callback(logger.removeHandler, logged)

        def run(thread: int) -> None:
            lock = client.get_lock(name)
            stop = time.monotonic() + seconds
            try:
                while time.monotonic() < stop:
                    if not lock.try_lock(wait_time=10, lease_time=20):
                        continue
                    acquired = time.monotonic_ns()
                    time.sleep(0.001)
                    released = time.monotonic_ns()
                    lock.unlock()
                    with mutex:
                        holds.append(Hold(0, thread, acquired, released))
            except BaseException as error:
                errors.append((time.time(), error))

        threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        if event is not None:
            event()
        for t in threads:
            t.join(seconds + 60)
    assert not errors, "\n".join(
        [*(f"{at:.3f} {error!r}" for at, error in errors), "logged:", *logged.lines]
    )
    return holds


class _Records(logging.Handler):
    """The WARNING (and worse) lines logged, with their time."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.created:.3f} {record.name}: {record.getMessage()}")


def _node_ids(cluster: RedisClusterSet) -> dict[int, str]:
    ids = {}
    for line in _cli("-p", str(cluster.masters()[0].port), "cluster", "nodes").splitlines():
        fields = line.split()
        ids[int(fields[1].split(":")[1].split("@")[0])] = fields[0]
    return ids


def _owner_port(cluster: RedisClusterSet, slot: int) -> int:
    r = redis.Redis(port=cluster.masters()[0].port)
    for start, end, master, *_ in raw_command(r, "CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            port = int(master[1])
            r.close()
            return port
    raise AssertionError("slot not covered")


def test_resharding_during_contention(redis_cluster: RedisClusterSet) -> None:
    name = f"reshard:{uuid.uuid4().hex}"
    slot = key_slot(name)
    source = _owner_port(redis_cluster, slot)
    target = next(s.port for s in redis_cluster.masters() if s.port != source)
    ids = _node_ids(redis_cluster)

    def migrate() -> None:
        step = logging.getLogger("syncprims.tests").warning  # in the failure's log lines

        def cli(port: int, *args: str, ok: tuple[str, ...] = ("OK",)) -> str:
            reply = _cli("-p", str(port), *args).strip()
            if reply not in ok:  # said in the failure's lines, not raised in this thread
                step("%s on %s answered %r", " ".join(args[:3]), port, reply)
            return reply

        time.sleep(0.7)
        step("migrating slot %s from %s to %s", slot, source, target)
        cli(target, "cluster", "setslot", str(slot), "importing", ids[source])
        cli(source, "cluster", "setslot", str(slot), "migrating", ids[target])
        time.sleep(0.5)  # callers meet ASK / TRYAGAIN while the slot is half-moved
        # Every key, a batch at a time until none is left, then the new owner named on the
        # target first, the source next, the others last: redis-cli --cluster reshard's order
        # (a source that still holds a key refuses SETSLOT NODE).
        while keys := _cli("-p", str(source), "cluster", "getkeysinslot", str(slot), "100").split():
            step("moving %d keys", len(keys))
            cli(source, "migrate", "127.0.0.1", str(target), "", "0", "5000", "keys", *keys,
                ok=("OK", "NOKEY"))  # fmt: skip
        others = [m.port for m in redis_cluster.masters() if m.port not in (source, target)]
        for port in (target, source, *others):
            cli(port, "cluster", "setslot", str(slot), "node", ids[target])
        step("slot %s moved", slot)

    holds = _contend(
        redis_cluster.url, name, 3.0, event=lambda: threading.Thread(target=migrate).start()
    )
    overlaps, handoffs = analyse(holds)
    assert overlaps == 0
    assert len(holds) > 20
    assert _owner_port(redis_cluster, slot) == target
    assert handoffs


def test_failover_during_contention(redis_cluster: RedisClusterSet) -> None:
    name = f"failover:{uuid.uuid4().hex}"
    slot = key_slot(name)
    owner = _owner_port(redis_cluster, slot)
    replica_port = next(
        s.port
        for s in redis_cluster.live()
        if f"master_port:{owner}" in _cli("-p", str(s.port), "info", "replication")
    )

    def failover() -> None:
        time.sleep(0.7)
        _cli("-p", str(replica_port), "cluster", "failover")  # graceful: the replica takes over

    holds = _contend(
        redis_cluster.url, name, 4.0, event=lambda: threading.Thread(target=failover).start()
    )
    overlaps, _ = analyse(holds)
    assert overlaps == 0
    assert len(holds) > 20
    assert _owner_port(redis_cluster, slot) == replica_port
    redis_cluster.wait_ok()


def test_watchdog_renews_locks_on_many_slots(redis_cluster: RedisClusterSet) -> None:
    # A 3 s lease, renewed every second, and a sleep longer than it: only renewals keep them
    # (0.9 s and 1.5 s leases lost holds in loaded runs: "no reply from Redis" before the
    # lease less its margins, the cluster's nodes and the services thread starved).
    with syncprims.connect(redis_cluster.url, lock_watchdog_timeout=3) as client:
        names = [f"wd:{uuid.uuid4().hex}" for _ in range(150)] + [
            f"{{wdtag}}:{i}" for i in range(50)
        ]
        for name in names:
            client.get_lock(name).lock()
        time.sleep(3.5)  # three renewal periods, and longer than the lease
        raw = raw_redis(redis_cluster.url)
        assert all(raw.pttl(name) > 0 for name in names)
        watchdog = client._ex.watchdog
        assert watchdog.lost == 0
        assert watchdog.renewed >= len(names)
        # the 50 tagged names share a slot: they are renewed together
        assert watchdog.round_trips < watchdog.renewed
        for name in names:
            client.get_lock(name).unlock()
        raw.close()


def test_demo_accepts_a_cluster_url(redis_cluster: RedisClusterSet) -> None:
    from syncprims.cli.demo import run_demo

    result = run_demo(redis_cluster.url, processes=2, threads=2, seconds=2)
    assert result.ok
    assert result.acquisitions > 0
