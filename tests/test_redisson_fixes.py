"""Redisson's 2026 lock fixes, checked here (issue 39): each test fails on a lock that has
the bug Redisson fixed.

* 4.4.0, PR #7098: a read lock's renewal touched the ``rwlock_timeout`` keys of other,
  dead clients' readers, so a crashed client's read hold lived on.
* 4.7.0, PR #7251: a read lock's renewal entry leaked after a reentrant unlock.
* 4.7.0, PR #7224: a fair ``tryLock`` that failed on its timeout left its queue entries:
  ``tests/test_fair_lock.py::test_timed_out_waiters_leave_the_queue_consistent``.
* 4.2.0: the renewal batch overflowed with many held locks.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from tests.harness import Face, raw_redis

pytestmark = pytest.mark.real


async def test_a_read_renewal_leaves_a_dead_readers_lease_alone(
    face: Face, real_url: str, name: str
) -> None:
    raw = raw_redis(real_url)
    dead = f"{uuid.uuid4()}:1"  # a reader of a client that crashed: nobody renews it
    dead_lease = f"{{{name}}}:{dead}:rwlock_timeout:1"
    raw.hset(name, mapping={"mode": "read", dead: 1})
    raw.set(dead_lease, 1, px=700)
    raw.pexpire(name, 700)
    client = await face.connect(real_url, lock_watchdog_timeout=0.6)
    read = client.get_read_write_lock(name).read_lock()
    a = face.actor()
    try:
        await a(read.lock)  # renewed every 0.2 s from now on
        await asyncio.sleep(1.2)
        assert raw.exists(dead_lease) == 0  # it ran out: not renewed by another's watchdog
        assert await a(read.is_held_by_current_thread)
        await a(read.unlock)
        assert raw.exists(name) == 0  # the dead reader's hold is gone with its lease
    finally:
        raw.close()


async def test_a_reentrant_read_unlock_leaves_no_renewal_behind(
    face: Face, real_url: str, name: str
) -> None:
    client = await face.connect(real_url, lock_watchdog_timeout=0.6)
    read = client.get_read_write_lock(name).read_lock()
    other = client.get_read_write_lock(name).read_lock()
    a, b = face.actor(), face.actor()
    for _ in range(3):
        await a(read.lock)
    await b(other.lock)
    for _ in range(3):
        await a(read.unlock)
    watchdog = client._ex.watchdog
    assert len(watchdog) == 1  # b's hold only
    await asyncio.sleep(0.8)  # renewals ran: b still holds, a renewed nothing of its own
    assert await b(other.is_held_by_current_thread)
    assert not await a(read.is_held_by_current_thread)
    await b(other.unlock)
    assert len(watchdog) == 0


def test_many_held_locks_are_renewed_in_batches(real_url: str) -> None:
    import syncprims

    count, batch = 250, 100
    with syncprims.connect(
        real_url, lock_watchdog_timeout=0.9, watchdog_batch_size=batch
    ) as client:
        locks = [client.get_lock(f"many:{uuid.uuid4().hex}") for _ in range(count)]
        for lock in locks:
            lock.lock()
        watchdog = client._ex.watchdog
        before = watchdog.round_trips
        time.sleep(2.0)  # two leases: every hold renewed twice or more
        assert watchdog.lost == 0
        raw: Any = raw_redis(real_url)
        try:
            ttls = [raw.pttl(lock.name) for lock in locks]
        finally:
            raw.close()
        assert min(ttls) > 0  # all alive
        trips = watchdog.round_trips - before
        assert trips >= 3 * 2  # at least ceil(250/100) calls per period
        assert watchdog.renewed >= 2 * count
        for lock in locks:
            lock.unlock()
