"""RLock behaviour on both faces, on fakeredis and on a real redis-server.

Scenarios ported from Redisson's ``RedissonLockTest``: reentrancy counts, lease expiry,
watchdog renewal, unlock by a non-owner, force unlock waking waiters, try_lock time bounds,
prompt wake-up on unlock, mutual exclusion.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import timedelta
from typing import Any

import pytest

import syncprims
from syncprims import LockNotHeldError
from tests.harness import Face, MakeLock, within


async def test_try_lock_and_unlock(make_lock: MakeLock, face: Face, client: Any, name: str) -> None:
    lock = make_lock(client, name)
    a = face.actor()
    assert lock.name == name
    assert not await a(lock.is_locked)
    assert await a(lock.try_lock)
    assert await a(lock.is_locked)
    assert await a(lock.is_held_by_current_thread)
    await a(lock.unlock)
    assert not await a(lock.is_locked)
    assert not await a(lock.is_held_by_current_thread)


async def test_reentrant_hold_count(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a = face.actor()
    assert await a(lock.try_lock)
    assert await a(lock.try_lock, wait_time=1)
    await a(lock.lock)
    assert await a(lock.get_hold_count) == 3
    await a(lock.unlock)
    assert await a(lock.get_hold_count) == 2
    await a(lock.unlock)
    assert await a(lock.is_locked)
    await a(lock.unlock)
    assert await a(lock.get_hold_count) == 0
    assert not await a(lock.is_locked)


async def test_unlock_by_another_owner_raises(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    with pytest.raises(LockNotHeldError) as info:
        await b(lock.unlock)
    assert isinstance(info.value, RuntimeError)
    assert info.value.name == name
    assert info.value.owner is not None and info.value.owner.startswith(client.id)
    assert name in str(info.value)
    assert await a(lock.get_hold_count) == 1  # unchanged
    await a(lock.unlock)


async def test_unlock_of_a_free_lock_raises(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    with pytest.raises(LockNotHeldError):
        await face.actor()(make_lock(client, name).unlock)


async def test_try_lock_without_wait_fails_at_once(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    start = time.monotonic()
    assert not await b(lock.try_lock)
    assert not await b(lock.try_lock, wait_time=0)
    assert time.monotonic() - start < 1.0
    assert not await b(lock.is_held_by_current_thread)
    await a(lock.unlock)


async def test_try_lock_wait_time_bounds(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    start = time.monotonic()
    assert not await within(10, b(lock.try_lock, wait_time=0.5))
    elapsed = time.monotonic() - start
    assert 0.5 <= elapsed < 2.5
    start = time.monotonic()
    assert not await within(10, b(lock.try_lock, wait_time=timedelta(milliseconds=300)))
    assert 0.3 <= time.monotonic() - start < 2.3
    await a(lock.unlock)


async def test_waiter_is_woken_by_unlock(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    # The holder's lease is the 30 s watchdog: only the unlock message can wake the waiter fast.
    lock = make_lock(client, name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    waiter = asyncio.ensure_future(b(lock.try_lock, wait_time=20))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    released = time.monotonic()
    await a(lock.unlock)
    assert await within(10, waiter)
    assert time.monotonic() - released < 5.0
    assert await b(lock.is_held_by_current_thread)
    await b(lock.unlock)


async def test_lock_waits_until_released(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    waiter = asyncio.ensure_future(b(lock.lock))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    await a(lock.unlock)
    await within(10, waiter)
    assert await b(lock.get_hold_count) == 1
    await b(lock.unlock)


async def test_force_unlock_wakes_waiters(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a, b, c = face.actor(), face.actor(), face.actor()
    await a(lock.lock)
    waiter = asyncio.ensure_future(b(lock.try_lock, wait_time=20))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    assert await c(lock.force_unlock)
    assert await within(10, waiter)
    assert time.monotonic() - started < 5.0
    assert await c(lock.force_unlock)  # b holds it now: forcing again frees it
    assert not await a(lock.is_held_by_current_thread)
    with pytest.raises(LockNotHeldError):
        await a(lock.unlock)


async def test_statistics(make_lock: MakeLock, face: Face, client: Any, name: str) -> None:
    lock = make_lock(client, name)
    a, b, c = face.actor(), face.actor(), face.actor()
    free = await a(lock.statistics)
    assert (free.name, free.locked, free.hold_count, free.waiters) == (name, False, 0, 0)
    assert free.lease_remaining is None
    await a(lock.lock)
    await a(lock.lock)
    waiter = asyncio.ensure_future(b(lock.try_lock, wait_time=20))
    deadline = time.monotonic() + 5
    while (held := await a(lock.statistics)).waiters == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert held.locked and held.hold_count == 2 and held.waiters == 1
    assert held.lease_remaining is not None and 0 < held.lease_remaining <= 60  # write: 2 x 30
    other = await c(lock.statistics)
    assert other.hold_count == 0 and other.owner != held.owner
    await a(lock.unlock)
    await a(lock.unlock)
    assert await within(10, waiter)
    after = await a(lock.statistics)
    assert after.locked and after.hold_count == 0 and after.waiters == 0
    await b(lock.unlock)


async def test_force_unlock_of_free_lock_is_false(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    assert not await face.actor()(make_lock(client, name).force_unlock)


async def test_delete_is_force_unlock(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a = face.actor()
    await a(lock.lock)
    assert await a(lock.delete)
    assert not await a(lock.is_locked)
    assert not await a(lock.delete)


async def test_lease_expires_and_unlock_then_raises(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a, b = face.actor(), face.actor()
    assert await a(lock.try_lock, lease_time=0.3)
    ttl = await a(lock.remain_time_to_live)
    assert ttl is not None and 0 < ttl <= 0.3
    await asyncio.sleep(0.6)
    assert not await a(lock.is_locked)
    assert await b(lock.try_lock)
    with pytest.raises(LockNotHeldError):
        await a(lock.unlock)
    await b(lock.unlock)


async def test_waiter_gets_lock_when_lease_runs_out(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    # Expiry publishes nothing: the waiter's wait is bounded by the holder's TTL.
    lock = make_lock(client, name)
    a, b = face.actor(), face.actor()
    assert await a(lock.try_lock, lease_time=0.5)
    start = time.monotonic()
    assert await within(10, b(lock.try_lock, wait_time=10, lease_time=5))
    assert 0.3 <= time.monotonic() - start < 4.0
    await b(lock.unlock)


async def test_explicit_lease_is_not_renewed(
    make_lock: MakeLock, face: Face, url: str, name: str
) -> None:
    client = await face.connect(url, lock_watchdog_timeout=0.6)
    lock = make_lock(client, name)
    a = face.actor()
    await a(lock.lock, lease_time=0.4)
    await asyncio.sleep(0.8)
    assert not await a(lock.is_locked)


async def test_watchdog_keeps_lock_past_its_timeout(
    make_lock: MakeLock, face: Face, url: str, name: str
) -> None:
    client = await face.connect(url, lock_watchdog_timeout=0.6)
    lock = make_lock(client, name)
    a = face.actor()
    await a(lock.lock)
    await asyncio.sleep(1.8)  # three watchdog timeouts
    assert await a(lock.is_held_by_current_thread)
    ttl = await a(lock.remain_time_to_live)
    assert ttl is not None and ttl <= 0.6
    await a(lock.unlock)
    assert not await a(lock.is_locked)


async def test_watchdog_keeps_reentrant_lock_until_last_unlock(
    make_lock: MakeLock, face: Face, url: str, name: str
) -> None:
    client = await face.connect(url, lock_watchdog_timeout=0.6)
    lock = make_lock(client, name)
    a = face.actor()
    await a(lock.lock)
    await a(lock.lock)
    await a(lock.unlock)
    await asyncio.sleep(1.2)
    assert await a(lock.get_hold_count) == 1
    await a(lock.unlock)
    await asyncio.sleep(0.9)  # no renewal resurrects it
    assert not await a(lock.is_locked)


async def test_watchdog_stops_and_reports_a_lost_lock(
    make_lock: MakeLock, face: Face, url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = await face.connect(url, lock_watchdog_timeout=0.6)
    other = await face.connect(url)  # another process, say
    lock, their_lock = make_lock(client, name), make_lock(other, name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)

    def reported() -> bool:
        return any("was lost" in r.getMessage() and name in r.getMessage() for r in caplog.records)

    with caplog.at_level("WARNING", logger="syncprims.watchdog"):
        await b(their_lock.force_unlock)  # someone else breaks the lock
        assert await b(their_lock.try_lock, lease_time=5)  # and takes it
        # at the next renewal (every 0.2 s), or at the lease's end if its reply is late (a
        # loaded machine): bounded, not timed
        deadline = time.monotonic() + 5
        while not reported() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    assert reported()
    with pytest.raises(LockNotHeldError):
        await a(lock.unlock)
    assert await b(their_lock.get_hold_count) == 1  # a's unlock did not touch b's hold
    await b(their_lock.unlock)


async def test_context_manager(make_lock: MakeLock, face: Face, client: Any, name: str) -> None:
    lock = make_lock(client, name)
    a = face.actor()

    if face.is_async:

        async def body() -> bool:
            async with lock as held:
                assert held is lock
                return bool(await lock.is_held_by_current_thread())

    else:

        def body() -> bool:  # type: ignore[misc]
            with lock as held:
                assert held is lock
                return bool(lock.is_held_by_current_thread())

    assert await a(body)
    assert not await a(lock.is_locked)


async def test_context_manager_releases_on_error(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)

    if face.is_async:

        async def body() -> None:
            async with lock:
                raise KeyError("boom")

    else:

        def body() -> None:  # type: ignore[misc]
            with lock:
                raise KeyError("boom")

    with pytest.raises(KeyError):
        await face.actor()(body)
    assert not await face.call(lock.is_locked)


async def test_threading_protocol(make_lock: MakeLock, face: Face, client: Any, name: str) -> None:
    lock = make_lock(client, name)
    a, b = face.actor(), face.actor()
    assert await a(lock.acquire)
    assert await a(lock.locked)
    assert not await b(lock.acquire, blocking=False)
    start = time.monotonic()
    assert not await b(lock.acquire, timeout=0.3)
    assert time.monotonic() - start >= 0.3
    await a(lock.release)
    assert await b(lock.acquire, True, 1)
    await b(lock.release)
    with pytest.raises(LockNotHeldError):
        await b(lock.release)
    with pytest.raises(ValueError, match="non-blocking"):
        await a(lock.acquire, blocking=False, timeout=1)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"wait_time": -1}, ValueError),
        ({"wait_time": math.nan}, ValueError),
        ({"wait_time": "5"}, TypeError),
        ({"wait_time": True}, TypeError),
        ({"lease_time": 0}, ValueError),
        ({"lease_time": -0.5}, ValueError),
        ({"lease_time": math.inf}, ValueError),
        ({"lease_time": math.nan}, ValueError),
        ({"lease_time": timedelta(seconds=-1)}, ValueError),
    ],
)
async def test_bad_durations_change_nothing(
    make_lock: MakeLock,
    face: Face,
    *,
    client: Any,
    name: str,
    kwargs: dict[str, Any],
    error: type[Exception],
) -> None:
    lock = make_lock(client, name)
    a = face.actor()
    with pytest.raises(error):
        await a(lock.try_lock, **kwargs)
    assert not await a(lock.is_exists)
    if "lease_time" in kwargs:
        with pytest.raises(error):
            await a(lock.lock, lease_time=kwargs["lease_time"])
        assert not await a(lock.is_exists)


@pytest.mark.parametrize(("bad", "error"), [("", ValueError), (5, TypeError), (b"x", TypeError)])
async def test_bad_names(
    make_lock: MakeLock, client: Any, bad: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        make_lock(client, bad)


async def test_is_held_by_thread(make_lock: MakeLock, face: Face, client: Any, name: str) -> None:
    lock = make_lock(client, name)
    a = face.actor()
    await a(lock.lock)
    # the owner id of actor a, as seen from inside a
    if face.is_async:
        from syncprims._core.owners import current_task_owner as owner_of_caller
    else:
        from syncprims._core.owners import current_thread_owner as owner_of_caller

    async def owner_async() -> int:
        return owner_of_caller()

    def owner_sync() -> int:
        return owner_of_caller()

    owner = await a(owner_async if face.is_async else owner_sync)
    assert await face.call(lock.is_held_by_thread, owner)
    assert not await face.call(lock.is_held_by_thread, owner + 1)
    await a(lock.unlock)
    assert not await face.call(lock.is_held_by_thread, owner)


async def test_two_clients_exclude_each_other(
    make_lock: MakeLock, face: Face, url: str, name: str
) -> None:
    first, second = await face.connect(url), await face.connect(url)
    assert first.id != second.id
    a = face.actor()
    # The same owner (thread or task) through two clients is two different owners.
    assert await a(make_lock(first, name).try_lock)
    assert not await a(make_lock(second, name).try_lock)
    with pytest.raises(LockNotHeldError):
        await a(make_lock(second, name).unlock)
    await a(make_lock(first, name).unlock)
    assert await a(make_lock(second, name).try_lock)
    await a(make_lock(second, name).unlock)


async def test_expirable_operations_on_a_lock(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    a = face.actor()
    assert await a(lock.remain_time_to_live) is None
    await a(lock.lock, lease_time=100)
    assert await a(lock.expire, 50)
    ttl = await a(lock.remain_time_to_live)
    assert ttl is not None and 49 < ttl <= 50
    assert await a(lock.clear_expire)
    assert await a(lock.remain_time_to_live) is None
    assert await a(lock.is_exists)
    await a(lock.unlock)
    assert not await a(lock.is_exists)  # (a fenced lock's token outlives it, on purpose)


async def test_touch_and_unlink(
    make_lock: MakeLock, face: Face, real_client: Any, name: str
) -> None:
    # real server only: fakeredis has no TOUCH
    lock = make_lock(real_client, name)
    a = face.actor()
    assert not await a(lock.touch)
    await a(lock.lock)
    assert await a(lock.touch)
    assert await a(lock.unlink)
    assert not await a(lock.is_exists)


async def test_mutual_exclusion_between_owners(
    make_lock: MakeLock, face: Face, client: Any, name: str
) -> None:
    lock = make_lock(client, name)
    inside = 0
    overlaps = 0
    total = 0

    if face.is_async:

        async def work() -> None:
            nonlocal inside, overlaps, total
            for _ in range(15):
                async with lock:
                    inside += 1
                    overlaps += inside > 1
                    await asyncio.sleep(0.001)
                    total += 1
                    inside -= 1

    else:

        def work() -> None:  # type: ignore[misc]
            nonlocal inside, overlaps, total
            for _ in range(15):
                with lock:
                    inside += 1
                    overlaps += inside > 1
                    time.sleep(0.001)
                    total += 1
                    inside -= 1

    actors = [face.actor() for _ in range(4)]
    await within(60, asyncio.gather(*(actor(work) for actor in actors)))
    assert overlaps == 0
    assert total == 60
    assert not await face.call(lock.is_locked)


def test_sync_face_types_are_the_public_ones(
    make_lock: MakeLock, redis_server: Any, name: str
) -> None:
    with syncprims.connect(redis_server.url) as client:
        lock = make_lock(client, name)
        assert isinstance(lock, syncprims.RLock)
        assert isinstance(lock, syncprims.RExpirable)
        assert isinstance(lock, syncprims.RObject)
        assert repr(lock) == f"<{type(lock).__name__} {name!r}>"
