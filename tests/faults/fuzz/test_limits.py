"""Inputs beyond the documented limits (found by the fuzz, fixed in the library)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal

import pytest

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer
from tests.faults.fuzz.helpers import (
    LOCKS,
    NAME,
    Driver,
    assert_unchanged,
    dump,
    reset,
)

pytestmark = [pytest.mark.real, pytest.mark.faults]


# -- inputs beyond the documented limits (found by this fuzz, fixed in the library) ---------


def bug(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=reason)


def refused_cleanly(drv: Driver, fn: Callable[[], object]) -> tuple[bool, object]:
    """(True, None) when ``fn`` raised TypeError/ValueError and wrote nothing, else
    (False, its result). Any other error propagates."""
    before = dump(drv.raw)
    try:
        result = fn()
    except (TypeError, ValueError):
        assert_unchanged(before, dump(drv.raw))
        return True, None
    return False, result


HUGE_LEASE = (
    "a finite lease above ~9.2e15 s passes lease_ms() (syncprims/_protocol/timing.py); the "
    "acquire script's HINCRBY/HSET runs, then its PEXPIRE fails: ServerReplyError, and the "
    "lock stays held with no TTL and no watchdog: held forever"
)


@pytest.mark.parametrize(
    ("kind", "lease"),
    [(kind, 1e16) for kind in LOCKS] + [("rlock", 2**70), ("rlock", 1e300)],
)
def test_huge_lease_leaves_a_lock_without_ttl(sync_drv: Driver, kind: str, lease: float) -> None:
    """Refused with ValueError, nothing written (it used to leave a lock with no TTL)."""
    reset(sync_drv.raw)
    lock = LOCKS[kind](sync_drv.client, NAME)
    try:
        refused, _ = refused_cleanly(sync_drv, lambda: lock.try_lock(0, lease))
        assert refused  # above MAX_LEASE_SECONDS
    finally:
        lock.force_unlock()


def test_huge_watchdog_timeout(fuzz_server: RedisServer) -> None:
    """Refused by Config, before connecting (a lease above MAX_LEASE_SECONDS)."""
    with pytest.raises(ValueError, match="lock_watchdog_timeout"):
        syncprims.connect(fuzz_server.url, lock_watchdog_timeout=1e16)


@pytest.mark.parametrize("kind", ["read", "write"])
def test_reentrant_rw_huge_lease_counts_a_failed_hold(sync_drv: Driver, kind: str) -> None:
    """Refused, and the hold count is still 1 (it used to count the failed hold)."""
    reset(sync_drv.raw)
    lock = LOCKS[kind](sync_drv.client, NAME)
    try:
        assert lock.try_lock(0, 60) is True
        refused, _ = refused_cleanly(sync_drv, lambda: lock.try_lock(0, 1e14))
        assert refused and lock.get_hold_count() == 1
    finally:
        lock.force_unlock()


def test_multi_lock_huge_lease(sync_drv: Driver) -> None:
    """Refused, nothing written (the sub-locks used to stay held with no TTL)."""
    reset(sync_drv.raw)
    subs = [sync_drv.client.get_lock(f"{NAME}:a"), sync_drv.client.get_lock(f"{NAME}:b")]
    try:
        refused, _ = refused_cleanly(sync_drv, lambda: syncprims.MultiLock(*subs).try_lock(0, 1e16))
        assert refused
    finally:
        for sub in subs:
            sub.force_unlock()


def test_multi_lock_tiny_lease_never_returns(
    fuzz_server: RedisServer, fuzz_loop: asyncio.AbstractEventLoop
) -> None:
    """ValueError at once (the wait used to never end)."""

    async def body() -> None:
        client = await syncprims.asyncio.connect(fuzz_server.url)
        subs = [client.get_lock(f"{NAME}:a"), client.get_lock(f"{NAME}:b")]
        try:
            with pytest.raises(ValueError, match="drift"):
                await asyncio.wait_for(syncprims.asyncio.MultiLock(*subs).lock(0.001), 1)
        finally:
            for sub in subs:
                await sub.force_unlock()
            await client.shutdown()

    fuzz_loop.run_until_complete(body())


def test_expire_huge_ttl(sync_drv: Driver) -> None:
    """Refused with ValueError (it used to be a ServerReplyError)."""
    reset(sync_drv.raw)
    sem = sync_drv.client.get_semaphore(NAME)
    assert sem.try_set_permits(1) is True
    refused, _ = refused_cleanly(sync_drv, lambda: sem.expire(1e16))
    assert refused


OVERFLOW = (
    "OverflowError, neither TypeError nor ValueError: to_seconds() calls float() on an int "
    "above ~1.8e308; lease_ms() calls math.ceil(seconds * 1000) = ceil(inf) for a lease "
    "above ~1.8e305; FairLockCore.slot_ms() does the same with a wait above ~1.8e305"
)


@pytest.mark.parametrize(
    "case",
    ["wait 10**400", "lease 1e306", "expire 1e306", "permit lease 1e306", "fair wait 1e306"],
)
def test_overflow_error(sync_drv: Driver, case: str) -> None:
    """No OverflowError: refused with nothing written, or (a huge wait) accepted."""
    reset(sync_drv.raw)
    client = sync_drv.client
    lock, fair = client.get_lock(NAME), client.get_fair_lock(f"{NAME}:fair")
    calls: dict[str, Callable[[], object]] = {
        "wait 10**400": lambda: lock.try_lock(10**400, 10),
        "lease 1e306": lambda: lock.try_lock(0, 1e306),
        "expire 1e306": lambda: lock.expire(1e306),
        "permit lease 1e306": lambda: client.get_permit_expirable_semaphore(NAME).try_acquire(
            0, 1e306
        ),
        "fair wait 1e306": lambda: fair.try_lock(1e306, 10),
    }
    try:
        refused, result = refused_cleanly(sync_drv, calls[case])
        if case in ("wait 10**400", "fair wait 1e306"):
            assert result is True  # a wait beyond any float is a wait forever; free: taken
        else:
            assert refused
    finally:
        lock.force_unlock()
        fair.force_unlock()


def test_acquire_signalling_nan_timeout(sync_drv: Driver) -> None:
    reset(sync_drv.raw)
    lock = sync_drv.client.get_lock(NAME)
    refused, _ = refused_cleanly(sync_drv, lambda: lock.acquire(True, Decimal("sNaN")))
    assert refused


COUNTS_BUG = (
    "check_count() (syncprims/_protocol/values.py) has no upper bound, and the scripts pass "
    "counts through Lua numbers (doubles: integers exact to 2**53 only) and DECR/INCRBY "
    "(64-bit): large counts are accepted, then stored rounded, read back wrong, or make later "
    "operations fail with ServerReplyError"
)


def sem_try_set_2_63(drv: Driver) -> None:
    sem = drv.client.get_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: sem.try_set_permits(2**63))
    assert refused


def sem_add_2_53_plus_1(drv: Driver) -> None:
    sem = drv.client.get_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: sem.add_permits(2**53 + 1))
    assert refused


def sem_add_2_64(drv: Driver) -> None:
    sem = drv.client.get_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: sem.add_permits(2**64))
    assert refused


def sem_release_2_63(drv: Driver) -> None:
    sem = drv.client.get_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: sem.release(2**63))  # now: ServerReplyError
    assert refused


def latch_2_63(drv: Driver) -> None:
    latch = drv.client.get_count_down_latch(NAME)
    refused, _ = refused_cleanly(drv, lambda: latch.try_set_count(2**63))
    assert refused


def permits_2_53_plus_1(drv: Driver) -> None:
    pes = drv.client.get_permit_expirable_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: pes.try_set_permits(2**53 + 1))
    assert refused


def permits_2_63_minus_1(drv: Driver) -> None:
    pes = drv.client.get_permit_expirable_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: pes.try_set_permits(2**63 - 1))
    assert refused


def permits_set_2_53_plus_1(drv: Driver) -> None:
    pes = drv.client.get_permit_expirable_semaphore(NAME)
    assert pes.try_set_permits(1) is True
    refused, _ = refused_cleanly(drv, lambda: pes.set_permits(2**53 + 1))
    assert refused


@pytest.mark.parametrize(
    "case",
    [
        sem_try_set_2_63,
        sem_add_2_53_plus_1,
        sem_add_2_64,
        sem_release_2_63,
        latch_2_63,
        permits_2_53_plus_1,
        permits_2_63_minus_1,
        permits_set_2_53_plus_1,
    ],
    ids=lambda case: str(case.__name__),
)
def test_huge_counts(sync_drv: Driver, case: Callable[[Driver], None]) -> None:
    """Refused with ValueError before anything is written (counts are Java ints)."""
    reset(sync_drv.raw)
    case(sync_drv)
