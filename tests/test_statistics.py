"""``statistics()`` of the semaphores, the latch, the read-write lock and MultiLock."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import syncprims
from tests.harness import Face, within


async def test_semaphore_statistics(face: Face, client: Any, name: str) -> None:
    sem = client.get_semaphore(name)
    a = face.actor()
    assert await a(sem.statistics) == syncprims.SemaphoreStatistics(name, 0, None, 0)
    waiter = asyncio.ensure_future(face.actor()(sem.try_acquire, 1, 20))
    deadline = time.monotonic() + 5
    while (stats := await a(sem.statistics)).waiters == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert stats == syncprims.SemaphoreStatistics(name, 0, None, 1)
    await a(sem.add_permits, 3)
    assert await within(10, waiter)
    assert await a(sem.statistics) == syncprims.SemaphoreStatistics(name, 2, None, 0)


async def test_permit_expirable_semaphore_statistics(face: Face, client: Any, name: str) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    await a(sem.try_set_permits, 2)
    permit = await a(sem.acquire)
    assert await a(sem.statistics) == syncprims.SemaphoreStatistics(name, 1, 1, 0)
    await a(sem.release, permit)
    assert await a(sem.statistics) == syncprims.SemaphoreStatistics(name, 2, 0, 0)


async def test_latch_statistics(face: Face, client: Any, name: str) -> None:
    latch = client.get_count_down_latch(name)
    a = face.actor()
    await a(latch.try_set_count, 1)
    waiter = asyncio.ensure_future(face.actor()(latch.wait, 20))
    deadline = time.monotonic() + 5
    while (stats := await a(latch.statistics)).waiters == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert stats == syncprims.LatchStatistics(name, 1, 1)
    await a(latch.count_down)
    assert await within(10, waiter)
    assert await a(latch.statistics) == syncprims.LatchStatistics(name, 0, 0)


async def test_read_write_and_multi_lock_statistics(face: Face, client: Any, name: str) -> None:
    rw = client.get_read_write_lock(name)
    a = face.actor()
    await a(rw.read_lock().lock)
    read, write = await a(rw.statistics)
    assert (read.kind, read.locked, read.hold_count) == ("read lock", True, 1)
    assert (write.kind, write.locked, write.hold_count) == ("write lock", False, 0)
    await a(rw.read_lock().unlock)
    multi = client.get_multi_lock(client.get_lock(name + ":1"), client.get_lock(name + ":2"))
    await a(multi.lock)
    stats = await a(multi.statistics)
    assert [(s.name, s.hold_count) for s in stats] == [(name + ":1", 1), (name + ":2", 1)]
    await a(multi.unlock)
