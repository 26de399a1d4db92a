"""An explicit owner (``owner=``, ``client.new_owner()``): a hold taken in one thread or task
and released in another (issue 30, item 2)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import syncprims
from syncprims import LockNotHeldError, OwnerId
from tests.harness import Face, MakeLock


def test_owner_ids_are_negative_and_typed() -> None:
    a, b = syncprims.OwnerId(-1), syncprims.OwnerId(-1)
    assert a == b and hash(a) == hash(b)
    with pytest.raises(ValueError, match="negative"):
        OwnerId(5)
    with pytest.raises(ValueError, match="negative"):
        OwnerId(True)


async def test_a_hold_taken_by_one_owner_is_released_by_another_thread_or_task(
    face: Face, url: str, name: str, make_lock: MakeLock, raw: Any
) -> None:
    client = await face.connect(url)
    other = await face.connect(url)
    job = client.new_owner()
    assert isinstance(job, OwnerId) and job.value < 0
    assert client.new_owner() != job
    lock, theirs = make_lock(client, name), make_lock(other, name)
    a, b, c = face.actor(), face.actor(), face.actor()
    await a(lambda: lock.lock(owner=job))
    await a(lambda: lock.lock(owner=job))  # reentrant for the owner, whichever caller
    # The hold belongs to the owner, not to the caller that took it.
    assert await a(lock.get_hold_count) == 0
    assert await b(lambda: lock.get_hold_count(owner=job)) == 2
    assert await b(lambda: lock.is_held_by_thread(job))
    assert not await a(lock.is_held_by_current_thread)
    await b(lambda: lock.ensure_held(owner=job))
    # The lock's field names the owner id.
    fields = [f.decode() for f in raw.hkeys(name) if f != b"mode"]
    assert len(fields) == 1
    assert fields[0].startswith(f"{client._ex.client_id}:{job.value}")
    # Another owner of the same process is excluded, and so is another client.
    assert not await a(lambda: lock.try_lock(0))
    assert not await c(lambda: lock.try_lock(0, owner=client.new_owner()))
    assert not await c(lambda: theirs.try_lock(0))
    with pytest.raises(LockNotHeldError):
        await a(lock.unlock)  # the caller that took it is not the owner
    await c(lambda: lock.unlock(owner=job))
    assert await c(lock.is_locked)
    await b(lambda: lock.release(owner=job))
    assert not await c(lock.is_locked)
    assert raw.exists(name) == 0
    with pytest.raises(LockNotHeldError):
        await b(lambda: lock.unlock(owner=job))


async def test_the_watchdog_renews_an_owners_hold_after_its_caller_is_gone(
    face: Face, url: str, name: str, raw: Any
) -> None:
    client = await face.connect(url, lock_watchdog_timeout=0.6)
    lock = client.get_lock(name)
    job = client.new_owner()
    taker = face.actor()
    assert await taker(lambda: lock.try_lock(0, owner=job))
    await taker.close()  # the thread or task that took it ends
    await asyncio.sleep(1.5)  # two and a half leases: renewed meanwhile
    assert raw.exists(name) == 1
    assert 0 < raw.pttl(name) <= 600
    await face.actor()(lambda: lock.unlock(owner=job))
    assert raw.exists(name) == 0


async def test_on_lost_reports_an_owners_lost_hold(face: Face, url: str, name: str) -> None:
    reports: list[str] = []
    reported = threading.Event()

    def on_lost(lost: str, reason: str) -> None:
        reports.append(reason)
        reported.set()

    client = await face.connect(url, lock_watchdog_timeout=0.6)
    lock = client.get_lock(name, on_lost=on_lost)
    other = await face.connect(url)
    job = client.new_owner()
    await face.actor()(lambda: lock.lock(owner=job))
    await face.actor()(other.get_lock(name).force_unlock)  # another client breaks it
    assert await asyncio.get_running_loop().run_in_executor(None, reported.wait, 5)
    with pytest.raises(syncprims.LockLostError):
        await face.actor()(lambda: lock.ensure_held(owner=job))


async def test_acquire_try_lock_and_tokens_take_an_owner(
    face: Face, client: Any, name: str
) -> None:
    job = client.new_owner()
    a, b = face.actor(), face.actor()
    lock = client.get_lock(name)
    assert await a(lambda: lock.acquire(timeout=1, owner=job))
    assert (await b(lambda: lock.statistics(owner=job))).hold_count == 1
    await b(lambda: lock.release(owner=job))
    fenced = client.get_fenced_lock(name + ":f")
    first = await a(lambda: fenced.lock_and_get_token(owner=job))
    second = await a(lambda: fenced.try_lock_and_get_token(0, owner=job))
    assert second is not None and second > first
    await b(lambda: fenced.unlock(owner=job))
    await b(lambda: fenced.unlock(owner=job))
    assert not await b(fenced.is_locked)


async def test_a_multilock_hold_follows_its_owner(face: Face, client: Any, name: str) -> None:
    multi = client.get_multi_lock(client.get_lock(name + ":1"), client.get_lock(name + ":2"))
    job = client.new_owner()
    a, b = face.actor(), face.actor()
    assert await a(lambda: multi.try_lock(1, 5, owner=job))
    assert await b(lambda: multi.validity_time(owner=job)) is not None
    assert not await b(lambda: multi.try_lock(0))
    await b(lambda: multi.unlock(owner=job))
    assert not await b(multi.is_locked)


async def test_a_bad_owner_is_a_type_error_and_sends_nothing(
    face: Face, client: Any, name: str, raw: Any
) -> None:
    lock = client.get_lock(name)
    a = face.actor()
    for bad in (5, "me", None.__class__):
        with pytest.raises(TypeError, match="OwnerId"):
            await a(lambda bad=bad: lock.lock(owner=bad))
        with pytest.raises(TypeError, match="OwnerId"):
            await a(lambda bad=bad: lock.unlock(owner=bad))
    with pytest.raises(TypeError):
        await a(lambda: lock.is_held_by_thread("x"))
    assert raw.exists(name) == 0
