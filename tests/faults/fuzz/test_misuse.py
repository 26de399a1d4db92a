"""Misuse: unlock not held, double unlock, release after expiry, force unlock of a free lock."""

from __future__ import annotations

import asyncio
import time

import pytest

from syncprims.errors import LockNotHeldError, PermitNotHeldError
from tests.faults.fuzz.helpers import (
    LOCKS,
    NAME,
    Driver,
    assert_unchanged,
    attempt,
    dump,
    reset,
    settled_dump,
)

pytestmark = [pytest.mark.real, pytest.mark.faults]


# -- misuse ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(LOCKS))
def test_unlock_misuse(drv: Driver, kind: str) -> None:
    """unlock() never held, a second unlock(), and unlock() by another owner raise
    LockNotHeldError (a RuntimeError); none of them changes what is held."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        lock = LOCKS[kind](drv.client, NAME)
        before = await settled_dump(drv.raw)
        error = await attempt(call(lock.unlock))
        assert type(error) is LockNotHeldError and isinstance(error, RuntimeError)
        assert error.name == NAME
        assert_unchanged(before, await settled_dump(drv.raw))

        assert await call(lock.try_lock, 0, 60) is True
        await call(lock.unlock)
        before = await settled_dump(drv.raw)
        assert type(await attempt(call(lock.unlock))) is LockNotHeldError
        assert_unchanged(before, await settled_dump(drv.raw))

        assert await call(lock.try_lock, 0, 60) is True
        before = await settled_dump(drv.raw)
        error = await attempt(drv.as_other_owner(lock.unlock))
        assert type(error) is LockNotHeldError
        assert await call(lock.is_held_by_current_thread) is True
        assert await call(lock.get_hold_count) == 1
        assert_unchanged(before, await settled_dump(drv.raw))
        await call(lock.unlock)
        assert await call(lock.is_locked) is False

    drv.run(body())


def test_read_lock_unlocked_by_another_reader(drv: Driver) -> None:
    """Two readers share the read lock; one that released its hold cannot release the
    other's (LockNotHeldError, nothing written)."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        read = drv.client.get_read_write_lock(NAME).read_lock()
        assert await drv.as_other_owner(read.try_lock, 0, 60) is True
        assert await call(read.try_lock, 0, 60) is True
        await call(read.unlock)
        before = await settled_dump(drv.raw)
        error = await attempt(call(read.unlock))
        assert type(error) is LockNotHeldError and error.name == NAME
        assert_unchanged(before, await settled_dump(drv.raw))
        assert await call(read.is_locked) is True  # the other reader still holds it
        readers = {k: v for k, v in drv.raw.hgetall(NAME).items() if k != b"mode"}
        assert list(readers.values()) == [b"1"]
        await drv.as_other_owner(read.force_unlock)

    drv.run(body())


def test_unlock_after_the_lease_ran_out(drv: Driver) -> None:
    """A hold whose explicit lease ran out: is_lost, and unlock() raises LockNotHeldError
    (docs/errors.md) and writes nothing."""

    async def body() -> None:
        reset(drv.raw)
        locks = {kind: LOCKS[kind](drv.client, f"{NAME}:{kind}") for kind in LOCKS}
        for lock in locks.values():
            assert await drv.call(lock.try_lock, 0, 0.2) is True
        await asyncio.sleep(0.35)
        before = await settled_dump(drv.raw)
        assert not {lock.name.encode() for lock in locks.values()} & before.keys()
        for kind, lock in locks.items():
            assert lock.is_lost is True, kind
            error = await attempt(drv.call(lock.unlock))
            assert type(error) is LockNotHeldError, (kind, error)
        assert_unchanged(before, await settled_dump(drv.raw))

    drv.run(body())


@pytest.mark.parametrize("kind", list(LOCKS))
def test_force_unlock_of_a_free_lock(drv: Driver, kind: str) -> None:
    """force_unlock() of a lock nobody holds answers False and writes nothing."""

    async def body() -> None:
        reset(drv.raw)
        lock = LOCKS[kind](drv.client, NAME)
        before = dump(drv.raw)
        assert await drv.call(lock.force_unlock) is False
        assert_unchanged(before, dump(drv.raw))
        assert await drv.call(lock.try_lock, 0, 60) is True
        assert await drv.as_other_owner(lock.force_unlock) is True
        assert await drv.call(lock.is_locked) is False

    drv.run(body())


def test_multi_lock_unlock_not_held(drv: Driver) -> None:
    """MultiLock.unlock() without holding raises LockNotHeldError and writes nothing."""

    async def body() -> None:
        reset(drv.raw)
        client = drv.client
        multi = drv.module.MultiLock(client.get_lock(f"{NAME}:a"), client.get_lock(f"{NAME}:b"))
        before = await settled_dump(drv.raw)
        assert type(await attempt(drv.call(multi.unlock))) is LockNotHeldError
        assert_unchanged(before, await settled_dump(drv.raw))

    drv.run(body())


def test_semaphore_release_without_acquire_adds_permits(drv: Driver) -> None:
    """docs/semaphores.md: permits belong to nobody; a release adds them (Redisson)."""

    async def body() -> None:
        reset(drv.raw)
        sem = drv.client.get_semaphore(NAME)
        await drv.call(sem.release, 2)
        assert await drv.call(sem.available_permits) == 2
        await drv.as_other_owner(sem.release, 1)
        assert await drv.call(sem.available_permits) == 3

    drv.run(body())


def test_permit_release_misuse(drv: Driver) -> None:
    """A bogus or already released permit id: PermitNotHeldError from release, False from
    try_release; the permits actually leased are untouched."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        pes = drv.client.get_permit_expirable_semaphore(NAME)
        assert await call(pes.try_set_permits, 2) is True
        permit = await call(pes.try_acquire, 0, 60)
        assert isinstance(permit, str)
        bogus = "f" * 32 if permit != "f" * 32 else "e" * 32
        before = dump(drv.raw)
        error = await attempt(call(pes.release, bogus))
        assert type(error) is PermitNotHeldError and isinstance(error, ValueError)
        assert await call(pes.try_release, bogus) is False
        assert_unchanged(before, dump(drv.raw))
        await call(pes.release, permit)
        before = dump(drv.raw)
        assert type(await attempt(call(pes.release, permit))) is PermitNotHeldError
        assert await call(pes.try_release, permit) is False
        assert_unchanged(before, dump(drv.raw))
        assert await call(pes.available_permits) == 2

    drv.run(body())


def test_permit_release_after_its_lease_ran_out(drv: Driver) -> None:
    """A permit whose lease ran out: release raises PermitNotHeldError; the permit is back."""

    async def body() -> None:
        reset(drv.raw)
        pes = drv.client.get_permit_expirable_semaphore(NAME)
        assert await drv.call(pes.try_set_permits, 1) is True
        permit = await drv.call(pes.try_acquire, 0, 0.1)
        assert isinstance(permit, str)
        await asyncio.sleep(0.25)
        assert type(await attempt(drv.call(pes.release, permit))) is PermitNotHeldError
        assert await drv.call(pes.available_permits) == 1

    drv.run(body())


def test_latch_misuse(drv: Driver) -> None:
    """count_down() of an open latch changes nothing; wait() of a closed one times out."""

    async def body() -> None:
        reset(drv.raw)
        latch = drv.client.get_count_down_latch(NAME)
        before = dump(drv.raw)
        await drv.call(latch.count_down)
        assert await drv.call(latch.get_count) == 0
        assert_unchanged(before, dump(drv.raw))
        assert await drv.call(latch.try_set_count, 1) is True
        before = dump(drv.raw)
        started = time.monotonic()
        assert await drv.call(latch.wait, 0.05) is False
        assert time.monotonic() - started < 2
        assert_unchanged(before, dump(drv.raw))

    drv.run(body())
