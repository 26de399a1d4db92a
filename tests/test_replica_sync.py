"""Replica synchronisation of lock acquisitions (``lock_synced_replicas``), on real servers
with and without a replica, through both faces.

The ``WAIT`` goes in the same write as the acquire script; ``"auto"`` (the default) waits
for the replicas the master has and sends no ``WAIT`` at all to a master without one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import syncprims
from syncprims import ReplicaSyncError
from syncprims._embedded import RedisServer
from syncprims._transport import replicas
from tests.harness import Face, raw_redis, wait_replica_acks

pytestmark = pytest.mark.real

QUICK = ["--repl-diskless-sync-delay", "0"]


class Pair:
    """A master with one replica, and a server without."""

    def __init__(self) -> None:
        self.alone = RedisServer()
        self.master = RedisServer(args=QUICK)
        self.replica = RedisServer(args=[*QUICK, "--replicaof", "127.0.0.1", str(self.master.port)])
        self.synced()

    def synced(self) -> None:
        r = raw_redis(self.master.url)
        wait_replica_acks(r)
        r.close()

    def stop(self) -> None:
        self.replica.stop()
        self.master.stop()
        self.alone.stop()


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    servers = Pair()
    yield servers
    servers.stop()


def waits(url: str) -> int:
    """How many ``WAIT`` commands the server has run."""
    r = raw_redis(url)
    stats: Any = r.info("commandstats")
    r.close()
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def name() -> str:
    return f"rs:{uuid.uuid4().hex[:10]}"


def test_auto_is_the_default() -> None:
    assert syncprims.Config().lock_synced_replicas == "auto"
    assert syncprims.Config(lock_synced_replicas=0).lock_synced_replicas == 0


@pytest.mark.parametrize(
    ("value", "error"), [("two", ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_bad_replica_settings(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        syncprims.Config(lock_synced_replicas=value)


def test_connected_replicas_parses_info() -> None:
    info = (
        b"# Replication\r\nrole:master\r\nconnected_slaves:3\r\n"
        b"slave0:ip=127.0.0.1,port=1,state=online,offset=9,lag=0\r\n"
        b"slave1:ip=127.0.0.1,port=2,state=wait_bgsave,offset=0,lag=0\r\n"
        b"slave2:ip=127.0.0.1,port=3,state=online,offset=9,lag=1\r\n"
    )
    assert replicas.connected_replicas(info) == 2  # the one still loading cannot ack yet
    assert replicas.connected_replicas(b"# Replication\r\nrole:slave\r\n") == 0
    # Decoded, as redis-py 5.0's hiredis parser gives every reply with decode_responses=True
    # (connect() raised "TypeError: string argument without an encoding" there).
    assert replicas.connected_replicas(info.decode()) == 2


async def test_auto_without_replica_sends_no_wait(face: Face, pair: Pair) -> None:
    client = await face.connect(pair.alone.url)
    lock = client.get_lock(name())
    actor = face.actor()
    before = waits(pair.alone.url)
    for _ in range(3):
        await actor(lock.lock)
        await actor(lock.unlock)
    assert waits(pair.alone.url) == before


async def test_explicit_count_without_replica_fails_and_undoes(face: Face, pair: Pair) -> None:
    client = await face.connect(pair.alone.url, lock_synced_replicas=1, replica_sync_timeout=0.2)
    lock_name = name()
    with pytest.raises(ReplicaSyncError) as info:
        await face.actor()(client.get_lock(lock_name).try_lock, lease_time=10)
    assert (info.value.acknowledged, info.value.required) == (0, 1)
    r = raw_redis(pair.alone.url)
    assert r.exists(lock_name) == 0
    r.close()


async def test_auto_with_a_replica_waits_in_the_same_round_trip(face: Face, pair: Pair) -> None:
    client = await face.connect(pair.master.url)
    lock = client.get_lock(name())
    actor = face.actor()
    await actor(lock.lock)  # scripts loaded
    await actor(lock.unlock)
    before = waits(pair.master.url)
    for _ in range(3):
        await actor(lock.lock)
        await actor(lock.unlock)
    assert waits(pair.master.url) == before + 3
    # the reply of WAIT was read on the same connection: the next call is not confused
    assert await actor(lock.try_lock)
    assert await face.call(lock.is_locked)
    await actor(lock.unlock)


async def test_after_a_script_flush(face: Face, pair: Pair) -> None:
    """NOSCRIPT: WAIT ran behind the refused script; its reply is dropped, both are sent
    again behind SCRIPT LOAD."""
    client = await face.connect(pair.master.url, lock_synced_replicas=1)
    lock = client.get_lock(name())
    actor = face.actor()
    r = raw_redis(pair.master.url)
    r.script_flush()
    r.close()
    await actor(lock.lock)
    assert await actor(lock.is_held_by_current_thread)
    await actor(lock.unlock)
    assert not await face.call(lock.is_locked)


async def test_auto_replica_paused_undoes_and_raises(face: Face, pair: Pair) -> None:
    client = await face.connect(pair.master.url, replica_sync_timeout=0.3)
    lock_name = name()
    pair.replica.pause()
    try:
        with pytest.raises(ReplicaSyncError) as info:
            await face.actor()(client.get_lock(lock_name).try_lock, lease_time=10)
        assert (info.value.acknowledged, info.value.required) == (0, 1)
        r = raw_redis(pair.master.url)
        assert r.exists(lock_name) == 0  # undone on the master
        r.close()
    finally:
        pair.replica.resume()
    pair.synced()


async def test_opt_out_never_waits(face: Face, pair: Pair) -> None:
    client = await face.connect(pair.master.url, lock_synced_replicas=0)
    lock = client.get_lock(name())
    actor = face.actor()
    await actor(lock.lock)
    await actor(lock.unlock)
    before = waits(pair.master.url)
    pair.replica.pause()
    try:
        await actor(lock.lock)
        await actor(lock.unlock)
    finally:
        pair.replica.resume()
    assert waits(pair.master.url) == before
    pair.synced()


async def test_auto_learns_a_new_replica(face: Face, monkeypatch: pytest.MonkeyPatch) -> None:
    master = RedisServer(args=QUICK)
    replica: RedisServer | None = None
    try:
        client = await face.connect(master.url)
        lock = client.get_lock(name())
        actor = face.actor()
        await actor(lock.lock)
        await actor(lock.unlock)
        assert waits(master.url) == 0
        replica = RedisServer(args=[*QUICK, "--replicaof", "127.0.0.1", str(master.port)])
        r = raw_redis(master.url)
        wait_replica_acks(r)
        r.close()
        before = waits(master.url)
        monkeypatch.setattr(replicas, "RECHECK", 0.0)  # the next acquire looks again
        await actor(lock.lock)
        await actor(lock.unlock)
        assert waits(master.url) == before + 1
    finally:
        if replica is not None:
            replica.stop()
        master.stop()


def test_a_lower_count_waits_for_the_hold_down() -> None:
    count = replicas.ReplicaCount()
    count.seen(1, 0.0)
    assert count.count == 1
    count.seen(0, 1.0)  # a replica left, or a failover promoted it: not believed yet
    count.seen(0, 1.0 + replicas.HOLD_DOWN / 2)
    assert count.count == 1
    count.seen(1, 40.0)  # back: the hold down starts again
    count.seen(0, 41.0)
    count.seen(0, 41.0 + replicas.HOLD_DOWN)
    assert count.count == 0
    count.seen(2, 200.0)  # more: at once
    assert count.count == 2


async def test_auto_a_replica_that_left_fails_until_the_hold_down(
    face: Face, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master that lost its replica (as a demoted master in a split brain) does not grant
    unacknowledged locks at once; after the hold down it counts the replica gone."""
    master = RedisServer(args=QUICK)
    replica = RedisServer(args=[*QUICK, "--replicaof", "127.0.0.1", str(master.port)])
    try:
        r = raw_redis(master.url)
        wait_replica_acks(r)
        client = await face.connect(master.url, replica_sync_timeout=0.2)
        lock = client.get_lock(name())
        actor = face.actor()
        await actor(lock.lock)
        await actor(lock.unlock)
        replica.stop()
        while int(r.info("replication")["connected_slaves"]):
            pass
        with pytest.raises(ReplicaSyncError):
            await actor(lock.try_lock, lease_time=10)
        assert r.exists(lock.name) == 0
        monkeypatch.setattr(replicas, "HOLD_DOWN", 0.0)  # the failure's look started it
        assert await actor(lock.try_lock, lease_time=10)  # this one's look ends it
        await actor(lock.unlock)
        r.close()
    finally:
        replica.stop()
        master.stop()


async def test_a_wait_ended_by_a_failover_is_undone_and_the_wait_goes_on(
    face: Face, pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis ends a blocked ``WAIT`` with ``UNBLOCKED`` when its master becomes a replica (a
    failover; found by tests/test_cluster.py's failover under contention). The acquisition is
    undone, and a wait tries again (here the same master, the error simulated once); a single
    attempt raises a ``TransportError`` that did not run."""
    from syncprims._runtime.aio import AsyncExecutor
    from syncprims._runtime.sync import SyncExecutor

    executor: Any = AsyncExecutor if face.is_async else SyncExecutor
    real = executor.eval_then
    thens: list[object] = []

    async def unblocked_once(self: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        reply, then = await real(self, *args, **kwargs)
        thens.append(then)
        if len(thens) % 2 == 1:  # the 1st, 3rd...: as a failover would end it
            then = syncprims.ServerReplyError(  # as the transport translates it
                "UNBLOCKED force unblock from blocking operation, instance state changed "
                "(master -> replica?)",
                code="UNBLOCKED",
            )
        return reply, then

    monkeypatch.setattr(executor, "eval_then", unblocked_once)
    client = await face.connect(pair.master.url)
    lock_name = name()
    lock = client.get_lock(lock_name)
    actor = face.actor()
    assert await actor(lock.try_lock, wait_time=5, lease_time=10)
    assert len(thens) == 2  # the first acquisition undone, the next attempt kept
    r = raw_redis(pair.master.url)
    assert list(r.hgetall(lock_name).values()) == [b"1"]  # held once, not twice
    await actor(lock.unlock)
    with pytest.raises(syncprims.TransportError) as info:  # the 3rd: a single attempt
        await actor(lock.try_lock, lease_time=10)
    assert not info.value.maybe_executed
    assert r.exists(lock_name) == 0  # undone
    r.close()


@pytest.mark.parametrize("replicas", ["auto", 0])
async def test_renewals_are_synced_too(face: Face, pair: Pair, replicas: Any) -> None:
    """A master cut off from its replica (as before a failover that would lose the lock)
    renews the lease and its replica never sees it: the renewal counts as failed, and the
    holder is told when its lease runs out. ``lock_synced_replicas=0`` opts out."""
    told: list[str] = []
    client = await face.connect(
        pair.master.url,
        lock_watchdog_timeout=0.9,
        replica_sync_timeout=0.05,
        lock_synced_replicas=replicas,
        retry_delay=(0.05, 0.1),
    )
    lock = client.get_lock(name(), on_lost=lambda _n, reason: told.append(reason))
    a = face.actor()
    await a(lock.lock)
    await asyncio.sleep(0.7)  # renewed, synced
    assert told == []
    before = waits(pair.master.url)
    pair.replica.pause()
    try:
        await asyncio.sleep(2.0)  # the lease (0.9 s) ran out twice over
    finally:
        pair.replica.resume()
    if replicas == "auto":
        assert told == [syncprims.LossReason.RENEWAL_FAILED]
        assert waits(pair.master.url) > before  # the renewals waited for the replica
        assert await a(lambda: lock.is_lost)
    else:
        assert told == [] and waits(pair.master.url) == before
        await a(lock.unlock)
    pair.synced()


async def test_min_replicas_to_write_tells_a_cut_off_master_holder(face: Face) -> None:
    """``min-replicas-to-write 1`` on the master (the server's own guard, docs/cluster.md):
    a master cut off from its replica refuses writes once the replica's lag passes
    ``min-replicas-max-lag``, renewals included, so its holder is told when its lease runs
    out, with or without ``lock_synced_replicas``."""
    master = RedisServer(args=QUICK)
    replica = RedisServer(args=[*QUICK, "--replicaof", "127.0.0.1", str(master.port)])
    try:
        r = raw_redis(master.url)
        wait_replica_acks(r)
        r.config_set("min-replicas-max-lag", 1)
        r.config_set("min-replicas-to-write", 1)  # once the replica is there
        r.close()
        told: list[str] = []
        client = await face.connect(
            master.url, lock_watchdog_timeout=0.9, lock_synced_replicas=0, retry_delay=(0.05, 0.1)
        )
        lock = client.get_lock(name(), on_lost=lambda _n, reason: told.append(reason))
        await face.actor()(lock.lock)
        replica.pause()
        try:
            deadline = asyncio.get_running_loop().time() + 8
            while not told and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
        finally:
            replica.resume()
        assert told == [syncprims.LossReason.RENEWAL_FAILED]
    finally:
        replica.stop()
        master.stop()
