"""``info()`` on every lock kind (and the semaphores and the latch), both faces, against a
real redis-server: holders with hold counts and processes, TTL, recorded waiters with their
deadlines, subscribers; a holder that is not a syncprims client; ACL refusals degrading to
"unknown"; and ``syncprims inspect`` rendering the same value."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import syncprims
from syncprims import LockHolder, LockInfo
from syncprims._protocol.info import parse_field, parse_record, record_key
from syncprims.cli import main
from tests.harness import Face, raw_redis

pytestmark = pytest.mark.real


async def until(
    check: Callable[[], Awaitable[LockInfo]],
    ready: Callable[[LockInfo], bool],
    what: str,
    within: float = 5,
) -> LockInfo:
    """Call ``check()`` again until ``ready(info)``; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + within
    while not ready(info := await check()):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)
    return info


def has_process(info: LockInfo) -> bool:
    """Every holder's record has been read (it is written in the background)."""
    return bool(info.holders) and all(h.process is not None for h in info.holders)


async def test_a_held_lock_shows_its_holder_hold_count_ttl_and_process(
    face: Face, real_client: Any, name: str
) -> None:
    lock = real_client.get_lock(name)
    a = face.actor()
    await a(lock.lock, 20)
    await a(lock.lock, 20)
    info = await until(lambda: face.call(lock.info), has_process, "no client record")
    assert (info.name, info.kind, info.held) == (name, "lock", True)
    assert info.ttl is not None and 15 < info.ttl <= 20
    [holder] = info.holders
    assert holder.client_id == real_client.id
    assert holder.field == f"{real_client.id}:{holder.owner}"
    assert (holder.hold_count, holder.incarnation, holder.side) == (2, 0, "")
    assert holder.syncprims_client is True
    assert holder.process is not None
    assert (holder.process.pid, holder.process.host) == (os.getpid(), socket.gethostname())
    assert holder.process.version == syncprims.__version__
    assert info.waiters == ()
    assert info.subscribers == 0
    assert info.channels == {f"redisson_lock__channel:{{{name}}}": 0}
    await a(lock.unlock)
    await a(lock.unlock)


async def test_a_free_lock_says_so(face: Face, real_client: Any, name: str) -> None:
    for lock in (
        real_client.get_lock(name),
        real_client.get_fair_lock(name),
        real_client.get_spin_lock(name),
        real_client.get_read_write_lock(name).read_lock(),
    ):
        info = await face.call(lock.info)
        assert (info.held, info.holders, info.ttl, info.waiters) == (False, (), None, ())
        assert info.mode is None


async def test_the_application_client_name_is_in_the_record(real_url: str, name: str) -> None:
    client = await syncprims.asyncio.connect(f"{real_url}?client_name=orders-api")
    try:
        lock = client.get_lock(name)
        await lock.lock()
        info = await until(lock.info, has_process, "no client record")
        assert info.holders[0].process is not None
        assert info.holders[0].process.client_name == "orders-api"
        await lock.unlock()
    finally:
        await client.shutdown()
    r = raw_redis(real_url)
    try:
        assert r.exists(record_key(client.id)) == 0  # shutdown deleted it
    finally:
        r.close()


async def test_a_fair_lock_shows_its_queue_with_deadlines(
    face: Face, real_url: str, name: str
) -> None:
    client = await face.connect(real_url, fair_lock_wait_timeout=60)
    others = [await face.connect(real_url) for _ in range(2)]
    fair = client.get_fair_lock(name)
    holder = face.actor()
    await holder(fair.lock)
    waits = []
    for other in others:
        waits.append(asyncio.ensure_future(face.actor()(other.get_fair_lock(name).try_lock, 5)))
        queued = len(waits)
        await until(  # queued in this order
            lambda: face.call(fair.info),
            lambda info: len(info.waiters) == queued,  # noqa: B023 - awaited at once
            "a waiter never queued",
        )
    info = await until(
        lambda: face.call(fair.info),
        lambda info: all(w.process is not None for w in info.waiters),
        "no waiter's client record",
    )
    assert info.kind == "fair lock"
    assert [h.client_id for h in info.holders] == [client.id]
    assert [w.position for w in info.waiters] == [1, 2]
    assert [w.client_id for w in info.waiters] == [other.id for other in others]
    for waiter in info.waiters:
        assert waiter.field == f"{waiter.client_id}:{waiter.owner}"
        assert waiter.deadline_in is not None and 0 < waiter.deadline_in <= 66
        assert waiter.syncprims_client is True
    # each waiter listens on a channel of its own, counted in the total
    for waiter in info.waiters:
        assert f"redisson_lock__channel:{{{name}}}:{waiter.field}" in info.channels
    await holder(fair.unlock)
    assert await waits[0]
    await face.actor()(others[0].get_fair_lock(name).force_unlock)
    assert await waits[1]
    await face.call(fair.force_unlock)


async def test_an_rlock_shows_the_registered_waiting_clients(
    face: Face, real_url: str, real_client: Any, name: str
) -> None:
    other = await face.connect(real_url)
    lock = real_client.get_lock(name)
    a = face.actor()
    await a(lock.lock)
    wait = asyncio.ensure_future(face.actor()(other.get_lock(name).try_lock, 5))
    info = await until(
        lambda: face.call(lock.info),
        lambda info: bool(info.waiters) and info.subscribers == 1,
        "the waiter never registered",
    )
    [waiter] = info.waiters
    assert waiter.client_id == other.id
    assert waiter.position == 1
    assert waiter.deadline_in is not None and waiter.deadline_in > 0
    await a(lock.unlock)
    assert await wait
    await face.call(other.get_lock(name).force_unlock)


async def test_a_field_of_another_client_is_not_a_syncprims_client(
    face: Face, real_url: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    java = f"{uuid.uuid4()}:57"  # what a Redisson Java client writes: no syncprims record
    r = raw_redis(real_url)
    try:
        r.hset(name, java, 3)
        r.pexpire(name, 30_000)
        client = await face.connect(real_url)
        info = await face.call(client.get_lock(name).info)
        [holder] = info.holders
        assert holder == LockHolder(
            field=java,
            client_id=java.split(":", maxsplit=1)[0],
            owner="57",
            hold_count=3,
            syncprims_client=False,
        )
        assert main(["inspect", name, "--url", real_url]) == 0
        out = capsys.readouterr().out
        assert "owner 57, hold count 3; not a syncprims client" in out
    finally:
        r.delete(name)
        r.close()


async def test_read_write_fenced_and_counting_kinds(
    face: Face, real_client: Any, name: str
) -> None:
    rw = real_client.get_read_write_lock(f"{name}:rw")
    a = face.actor()
    await a(rw.read_lock().lock, 10)
    await a(rw.read_lock().lock, 10)
    info = await face.call(rw.write_lock().info)  # either side shows the whole lock
    assert (info.kind, info.mode) == ("read-write lock", "read")
    [reader] = info.holders
    assert (reader.side, reader.hold_count, reader.client_id) == ("read", 2, real_client.id)
    assert reader.lease is not None and 5 < reader.lease <= 10
    whole = await face.call(rw.info)
    assert (whole.kind, whole.mode) == (info.kind, info.mode)
    assert [h.field for h in whole.holders] == [reader.field]
    await a(rw.read_lock().unlock)
    await a(rw.read_lock().unlock)

    fenced = real_client.get_fenced_lock(f"{name}:fenced")
    token = await a(fenced.lock_and_get_token)
    info = await face.call(fenced.info)
    assert (info.kind, info.held, info.token) == ("fenced lock", True, token)
    await a(fenced.unlock)
    info = await face.call(fenced.info)
    assert (info.held, info.token) == (False, token)  # the counter outlives the hold

    spin = real_client.get_spin_lock(f"{name}:spin")
    await a(spin.lock)
    info = await face.call(spin.info)
    assert (info.kind, len(info.holders), info.subscribers) == ("spin lock", 1, 0)
    await a(spin.unlock)

    semaphore = real_client.get_permit_expirable_semaphore(f"{name}:pes")
    assert await face.call(semaphore.try_set_permits, 3)
    permit = await a(semaphore.acquire, lease_time=10)
    sem_info = await face.call(semaphore.info)
    assert (sem_info.kind, sem_info.permits) == ("permit-expirable semaphore", 2)
    [lease] = sem_info.leases
    assert lease.permit_id == permit
    assert lease.expires_in is not None and 5 < lease.expires_in <= 10
    plain = real_client.get_semaphore(f"{name}:sem")
    assert await face.call(plain.try_set_permits, 2)
    assert (await face.call(plain.info)).permits == 2

    latch = real_client.get_count_down_latch(f"{name}:latch")
    assert (await face.call(latch.info)).count == 0
    assert await face.call(latch.try_set_count, 2)
    latch_info = await face.call(latch.info)
    assert (latch_info.count, latch_info.subscribers) == (2, 0)


async def test_refused_counts_and_records_are_unknown(face: Face, real_url: str, name: str) -> None:
    """A user whose ACL allows the lock's keys but neither ``PUBSUB`` nor the client
    records: ``info()`` still answers, with those parts unknown."""
    user, password = f"info-{uuid.uuid4().hex[:8]}", "secret"
    r = raw_redis(real_url)
    r.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["test:*", "*{test:*"],
        commands=["+@all", "-pubsub"],
    )  # fmt: skip
    try:
        owner = await face.connect(real_url)
        lock = owner.get_lock(name)
        a = face.actor()
        await a(lock.lock)
        host_port = real_url.removeprefix("redis://")
        limited = await face.connect(f"redis://{user}:{password}@{host_port}")
        info = await face.call(limited.get_lock(name).info)
        assert info.held
        assert (info.subscribers, dict(info.channels)) == (None, {})
        [holder] = info.holders
        assert (holder.client_id, holder.syncprims_client, holder.process) == (
            owner.id,
            None,
            None,
        )
        await a(lock.unlock)
    finally:
        r.acl_deluser(user)
        r.close()


def test_inspect_prints_the_holders_process(
    real_url: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with syncprims.connect(real_url) as client:
        lock = client.get_lock(name)
        lock.lock()
        deadline = time.monotonic() + 5
        while lock.info().holders[0].process is None:
            assert time.monotonic() < deadline, "no client record"
            time.sleep(0.05)
        assert main(["inspect", name, "--url", real_url]) == 0
        out = capsys.readouterr().out
        assert f"pid {os.getpid()} on {socket.gethostname()}" in out
        assert main(["inspect", name, "--url", real_url, "--json"]) == 0
        holder: dict[str, Any] = json.loads(capsys.readouterr().out)["holders"][0]
        assert holder["process"]["pid"] == os.getpid()
        assert holder["syncprims_client"] is True
        lock.unlock()


def test_fields_and_records_are_parsed() -> None:
    client = str(uuid.uuid4())
    assert parse_field(f"{client}:7") == (client, "7", 0, "")
    assert parse_field(f"{client}:7.2") == (client, "7", 2, "")
    assert parse_field(f"{client}:7.2:write") == (client, "7", 2, "write")
    assert parse_field(f"{client}:-7:write") == (client, "-7", 0, "write")
    assert parse_field("app:worker-1") == ("app", "worker-1", 0, "")
    assert parse_field("opaque") == ("", "opaque", 0, "")
    assert parse_record(None) is None
    assert parse_record(b"not json") is None
    assert parse_record(b'{"host": "h", "pid": "1", "version": "0"}') is None
    record = parse_record(b'{"host": "h", "pid": 1, "client_name": null, "version": "0.1"}')
    assert record is not None and (record.host, record.pid, record.client_name) == ("h", 1, None)
