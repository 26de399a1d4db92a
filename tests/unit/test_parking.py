"""The wake-up latch and signal, for thread and task waiters."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from syncprims._services.parking import Latch, Signal


def test_release_wakes_one_thread_waiter() -> None:
    latch = Latch()
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda: results.append(latch.wait_sync(5))) for _ in range(2)
    ]
    for t in threads:
        t.start()
    while latch.waiting() < 2:
        time.sleep(0.001)
    latch.release(1)
    time.sleep(0.1)
    assert results == [True]
    latch.release(1)
    for t in threads:
        t.join(5)
    assert results == [True, True]


def test_a_permit_is_kept_for_the_next_wait_up_to_the_cap() -> None:
    latch = Latch()
    latch.release(5, cap=2)
    assert latch.wait_sync(0)
    assert latch.wait_sync(0)
    assert not latch.wait_sync(0.01)


def test_timeout_returns_false_and_leaves_no_waiter() -> None:
    latch = Latch()
    start = time.monotonic()
    assert not latch.wait_sync(0.05)
    assert time.monotonic() - start >= 0.05
    assert latch.waiting() == 0


def test_task_waiters_woken_from_another_thread() -> None:
    async def main() -> list[bool]:
        latch = Latch()
        waiters = [asyncio.ensure_future(latch.wait_async(5)) for _ in range(3)]
        while latch.waiting() < 3:
            await asyncio.sleep(0.001)
        threading.Thread(target=latch.release, args=(3,)).start()
        return list(await asyncio.wait_for(asyncio.gather(*waiters), 5))

    assert asyncio.run(main()) == [True, True, True]


def test_task_waiter_timeout_and_permit() -> None:
    async def main() -> None:
        latch = Latch()
        assert not await latch.wait_async(0.02)
        assert latch.waiting() == 0
        latch.release(1)
        assert await latch.wait_async(None)

    asyncio.run(main())


def test_a_cancelled_woken_task_passes_the_wake_up_on() -> None:
    async def main() -> None:
        latch = Latch()
        first = asyncio.ensure_future(latch.wait_async(5))
        second = asyncio.ensure_future(latch.wait_async(5))
        while latch.waiting() < 2:
            await asyncio.sleep(0.001)
        latch.release(1)  # wakes `first` (scheduled, not yet run)...
        first.cancel()  # ...which is cancelled before it sees it
        assert await asyncio.wait_for(second, 5)
        with pytest.raises(asyncio.CancelledError):
            await first

    asyncio.run(main())


def test_signal_wakes_threads_and_tasks_and_stays_set() -> None:
    signal = Signal()
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(signal.wait_sync(5)))
    thread.start()

    async def main() -> bool:
        waiter = asyncio.ensure_future(signal.wait_async(5))
        await asyncio.sleep(0.05)
        signal.set()
        return await waiter

    assert asyncio.run(main())
    thread.join(5)
    assert results == [True]
    assert signal.wait_sync(0)
    assert signal.is_set


def test_signal_timeout_and_error() -> None:
    signal = Signal()
    assert not signal.wait_sync(0.01)
    signal.set(RuntimeError("closed"))
    with pytest.raises(RuntimeError, match="closed"):
        signal.wait_sync(1)
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(signal.wait_async(1))


def test_an_enlisted_wait_is_woken_by_its_callback_in_turn() -> None:
    """A waiter that blocks elsewhere (the direct grant's pop) is woken through its callback,
    in FIFO order with blocked threads; a kept permit is taken instead of enlisting."""
    latch = Latch()
    woken: list[str] = []
    token = latch.enlist(lambda: woken.append("popper"))
    assert token is not None and latch.waiting() == 1
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(latch.wait_sync(5)))
    thread.start()
    while latch.waiting() < 2:
        time.sleep(0.001)
    latch.release(1)  # the oldest waiter: the enlisted one
    assert woken == ["popper"] and latch.waiting() == 1
    assert not latch.delist(token)  # woken already
    latch.release(1)
    thread.join(5)
    assert result == [True]
    latch.release(1, cap=1)  # a permit nobody waited for
    assert latch.enlist(lambda: woken.append("late")) is None  # taken: woken at once
    other = latch.enlist(lambda: woken.append("gone"))
    assert other is not None and latch.delist(other)  # left before any wake-up
    latch.release(1)
    assert woken == ["popper"]


def test_an_armed_wait_is_woken_alone() -> None:
    """``armed`` hands a waiter a wake-up aimed at it alone (an RLock's grant message): it
    wakes that waiter, not the first in line; it does nothing once the wait is over; a kept
    permit is taken without arming."""
    latch = Latch()
    first: list[bool] = []
    armed: list[bool] = []
    wakes: list[Callable[[], None]] = []
    threads = [
        threading.Thread(target=lambda: first.append(latch.wait_sync(5))),
        threading.Thread(target=lambda: armed.append(latch.wait_sync(5, wakes.append))),
    ]
    threads[0].start()
    while latch.waiting() < 1:
        time.sleep(0.001)
    threads[1].start()
    while latch.waiting() < 2:
        time.sleep(0.001)
    assert len(wakes) == 1
    wakes[0]()  # the second in line, alone
    threads[1].join(5)
    assert armed == [True] and first == [] and latch.waiting() == 1
    wakes[0]()  # over: nothing happens (no permit is kept for anyone)
    latch.release(1)
    threads[0].join(5)
    assert first == [True] and latch.waiting() == 0

    async def tasks() -> None:
        task_wakes: list[Callable[[], None]] = []
        waiting = asyncio.ensure_future(latch.wait_async(5, task_wakes.append))
        while not task_wakes:
            await asyncio.sleep(0.001)
        task_wakes[0]()  # on the waiter's own loop (the asyncio reader task)
        assert await asyncio.wait_for(waiting, 5)
        assert not await latch.wait_async(0.05, task_wakes.append)  # timed out, armed again
        assert len(task_wakes) == 2
        task_wakes[1]()  # over: nothing happens

    asyncio.run(tasks())
    latch.release(1, cap=1)
    never: list[Callable[[], None]] = []
    assert latch.wait_sync(5, never.append) and never == []  # the permit, not armed
