"""Semaphore permits, waits, the permit-expirable semaphore and the latch count."""

from __future__ import annotations

import functools
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syncprims._protocol.values import MAX_COUNT
from syncprims.errors import PermitNotHeldError
from tests.faults.fuzz.helpers import (
    COUNTS,
    FUZZ,
    NAME,
    NEVER,
    PERMIT_IDS,
    PERMIT_LEASES,
    TTL_SLACK_MS,
    WAITS,
    Driver,
    Expected,
    assert_unchanged,
    attempt,
    check_accepted,
    check_rejected,
    close_to,
    count_error,
    dump,
    lease_error,
    lease_to_ms,
    permit_id_error,
    permit_ids_error,
    reset,
    tagged,
    wait_error,
)

pytestmark = [pytest.mark.real, pytest.mark.faults]


# -- semaphores and the latch ---------------------------------------------------------------------


@FUZZ
@given(
    method=st.sampled_from(["try_set_permits", "add_permits", "try_acquire", "acquire", "release"]),
    permits=COUNTS,
    exists=st.booleans(),
    start=st.integers(min_value=0, max_value=5),
)
def test_semaphore_counts(
    drv: Driver, method: str, permits: object, exists: bool, start: int
) -> None:
    """Semaphore counts: TypeError/ValueError and nothing written, or the documented count
    (release without acquire adds permits, as in Redisson; try_acquire of too many, or
    try_set_permits of an existing semaphore, answers False and changes nothing)."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        sem = drv.client.get_semaphore(NAME)
        if exists:
            assert await call(sem.try_set_permits, start) is True
            assert await call(sem.expire, 300) is True
        available = start if exists else 0
        before = dump(drv.raw)
        if method == "add_permits":
            expected: Expected = (
                TypeError
                if isinstance(permits, bool) or not isinstance(permits, int)
                else ValueError
                if abs(permits) > MAX_COUNT
                else None
            )
        else:
            expected = count_error(permits)
        fn = getattr(sem, method)
        args: tuple[object, ...] = (permits,)
        if method == "acquire":  # acquire(blocking, timeout, *, permits), as threading's
            fn, args = functools.partial(sem.acquire, permits=permits), ()
        if method == "acquire" and expected is None:
            assert isinstance(permits, int)
            if permits > available:  # would wait forever: one attempt instead
                fn, args = sem.try_acquire, (permits, None)
        if method == "try_acquire":
            args = (permits, None)
        result = await attempt(call(fn, *args))
        if expected is not None:
            check_rejected(result, expected, before, drv.raw)
            return
        check_accepted(result, f"{method}({permits!r})")
        assert isinstance(permits, int)
        now = await call(sem.available_permits)
        if method == "try_set_permits":
            assert result is (not exists)
            assert now == (available if exists else permits)
        elif method == "add_permits":
            assert result == now == available + permits
        elif method == "release":
            assert now == available + permits
        elif permits <= available:  # acquire, try_acquire
            assert result is True
            assert now == available - permits
        else:
            assert result is False
        if result is False:
            assert_unchanged(before, dump(drv.raw))
        if exists:  # every operation keeps the TTL
            assert 0 < int(drv.raw.pttl(NAME)) <= 300_000

    drv.run(body())


@FUZZ
@given(
    method=st.sampled_from(["try_acquire", "latch.wait", "latch.await_", "permit.try_acquire"]),
    wait=WAITS,
    lease=PERMIT_LEASES,
)
def test_waits(drv: Driver, method: str, wait: object, lease: object) -> None:
    """Wait times of semaphores, permits and the latch: TypeError/ValueError and nothing
    written, or at once the documented result (a permit is free, the latch is open)."""

    async def body() -> None:
        reset(drv.raw)
        call, client = drv.call, drv.client
        args: tuple[object, ...]
        if method == "try_acquire":
            sem = client.get_semaphore(NAME)
            assert await call(sem.try_set_permits, 1) is True
            fn, args, expected = sem.try_acquire, (1, wait), wait_error(wait)
        elif method == "permit.try_acquire":
            pes = client.get_permit_expirable_semaphore(NAME)
            assert await call(pes.try_set_permits, 1) is True
            fn, args = pes.try_acquire, (wait, lease)
            expected = wait_error(wait) or lease_error(lease)
        else:
            latch = client.get_count_down_latch(NAME)  # open: it does not exist
            fn = latch.wait if method == "latch.wait" else latch.await_
            args, expected = (wait,), wait_error(wait)
        before = dump(drv.raw)
        started = time.time() * 1000
        result = await attempt(call(fn, *args))
        if expected is not None:
            check_rejected(result, expected, before, drv.raw)
            return
        check_accepted(result, f"{method}{args!r}")
        if method == "try_acquire":
            assert result is True and drv.raw.get(NAME) == b"0"
        elif method == "permit.try_acquire":
            if result is None and lease is not None and lease_to_ms(lease) < 100:
                # a permit whose reply came after its lease (a few ms, on a loaded machine)
                # is given back, not taken: nothing stays leased
                assert drv.raw.zcard(f"{tagged(NAME)}:timeout") == 0
                return
            assert isinstance(result, str) and permit_id_error(result) is None
            ((member, score),) = drv.raw.zrange(f"{tagged(NAME)}:timeout", 0, -1, withscores=True)
            assert member == bytes.fromhex(result)
            if lease is None:
                assert score == NEVER
            else:
                assert close_to(score, started + lease_to_ms(lease)), (score, lease)
        else:
            assert result is True
            assert_unchanged(before, dump(drv.raw))

    drv.run(body())


@FUZZ
@given(
    method=st.sampled_from(
        ["try_set_permits", "set_permits", "acquire", "release", "try_release", "update"]
    ),
    value=COUNTS,
    permit=PERMIT_IDS,
    real=st.booleans(),
    lease=PERMIT_LEASES,
    start=st.integers(min_value=1, max_value=4),
    exists=st.booleans(),
)
def test_permit_expirable_semaphore(
    drv: Driver,
    *,
    method: str,
    value: object,
    permit: object,
    real: bool,
    lease: object,
    start: int,
    exists: bool,
) -> None:
    """PermitExpirableSemaphore: bad counts, leases and permit ids raise TypeError/ValueError
    and write nothing; an unknown id raises PermitNotHeldError (a ValueError) from release,
    answers False from try_release / update_lease_time, and changes nothing."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        pes = drv.client.get_permit_expirable_semaphore(NAME)
        held = None
        if exists:
            assert await call(pes.try_set_permits, start) is True
            held = await call(pes.try_acquire, 0, 300)
            assert isinstance(held, str)
        permit_id = held if real and held is not None else permit
        timeouts = f"{tagged(NAME)}:timeout"
        before = dump(drv.raw)
        args: tuple[object, ...]
        if method in ("try_set_permits", "set_permits"):
            args, expected = (value,), count_error(value)
        elif method == "acquire":
            args, expected = (), lease_error(lease)
        elif method == "update":
            args = (permit_id, lease)
            expected = permit_id_error(permit_id) or lease_error(lease)
        elif method in ("release", "try_release") and isinstance(permit_id, (list, tuple)):
            args, expected = (permit_id,), permit_ids_error(permit_id)  # all or none
        else:
            args, expected = (permit_id,), permit_id_error(permit_id)
        fn = getattr(pes, "update_lease_time" if method == "update" else method)
        if method == "acquire":  # acquire(blocking, timeout, *, lease_time)
            fn = functools.partial(pes.acquire, lease_time=lease)
        no_permit = method == "acquire" and (not exists or start < 2)
        if no_permit and expected is None:  # acquire() would wait forever: one attempt
            fn, args = pes.try_acquire, (0, lease)
        started = time.time() * 1000
        result = await attempt(call(fn, *args))
        if expected is not None:
            check_rejected(result, expected, before, drv.raw)
            return
        known = exists and permit_id == held
        if method == "release" and not known:
            assert isinstance(result, PermitNotHeldError), result
            assert result.name == NAME and result.permit_id == permit_id
            assert_unchanged(before, dump(drv.raw))
            return
        check_accepted(result, f"{method}{args!r}")
        # the lease given now, as a score, read before any call reclaims expired leases
        given_id = {"acquire": result, "update": permit_id}.get(method)
        score = (
            drv.raw.zscore(timeouts, bytes.fromhex(given_id)) if isinstance(given_id, str) else None
        )
        leased = await call(pes.acquired_permits)
        available = await call(pes.available_permits)
        if method == "try_set_permits":
            assert result is (not exists)
            if not exists:
                assert available == value
        elif method == "set_permits":
            assert isinstance(value, int)
            assert available + leased == value
        elif no_permit:
            assert result is None
        elif method in ("release", "try_release"):
            assert result is (None if method == "release" else known)
            if known:
                assert (available, leased) == (start, 0)
        elif method == "update" and not known:
            assert result is False
        else:  # a new permit, or a new lease for the one held
            if method == "acquire":
                assert isinstance(result, str) and permit_id_error(result) is None
            else:
                assert result is True
            if lease is None:
                assert score == NEVER
            else:
                assert score is not None and close_to(score, started + lease_to_ms(lease))
            if lease is None or lease_to_ms(lease) > TTL_SLACK_MS:  # not expired yet
                taken = 2 if method == "acquire" else 1
                assert (available, leased) == (start - taken, taken)
        if result is False or no_permit:
            assert_unchanged(before, dump(drv.raw))

    drv.run(body())


@FUZZ
@given(count=COUNTS, start=st.integers(min_value=0, max_value=3))
def test_latch_counts(drv: Driver, count: object, start: int) -> None:
    """try_set_count: TypeError/ValueError and nothing written; else set when the latch is
    open (``get_count()`` is the count), False and nothing changed when it is not."""

    async def body() -> None:
        reset(drv.raw)
        latch = drv.client.get_count_down_latch(NAME)
        if start:
            assert await drv.call(latch.try_set_count, start) is True
        before = dump(drv.raw)
        result = await attempt(drv.call(latch.try_set_count, count))
        expected = count_error(count)
        if expected is not None:
            check_rejected(result, expected, before, drv.raw)
            return
        check_accepted(result, f"try_set_count({count!r})")
        assert result is (start == 0)
        assert await drv.call(latch.get_count) == (start or count)
        if not result:
            assert_unchanged(before, dump(drv.raw))

    drv.run(body())
