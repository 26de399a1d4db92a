"""Semaphore and PermitExpirableSemaphore on both faces, fakeredis and real Redis."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import pytest
import redis

import syncprims
from syncprims import PermitNotHeldError
from tests import processes
from tests.harness import Face, raw_pubsub, within


async def test_permits_are_set_once_added_and_drained(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_semaphore(name)
    a = face.actor()
    assert await a(sem.available_permits) == 0
    assert await a(sem.try_set_permits, 3)
    assert not await a(sem.try_set_permits, 5)
    assert await a(sem.available_permits) == 3
    assert await a(sem.expire, 60)
    assert await a(sem.add_permits, 2) == 5
    assert await a(sem.add_permits, -1) == 4
    assert raw.pttl(name) > 0  # add keeps the TTL (Redisson drops it)
    assert await a(sem.drain_permits) == 4
    assert await a(sem.available_permits) == 0
    assert raw.pttl(name) > 0  # so does drain


async def test_acquire_and_release(face: Face, client: Any, name: str) -> None:
    sem = client.get_semaphore(name)
    a = face.actor()
    await a(sem.try_set_permits, 2)
    assert await a(sem.try_acquire, 2)
    assert not await a(sem.try_acquire)
    start = time.monotonic()
    assert not await a(sem.try_acquire, 1, 0.3)
    assert 0.3 <= time.monotonic() - start < 2.3
    await a(sem.release, 2)
    assert await a(sem.try_acquire, 0)  # nothing asked, nothing sent
    await a(sem.acquire)
    assert await a(sem.available_permits) == 1
    await a(sem.release, 0)
    await a(sem.release)
    assert await a(sem.available_permits) == 2


async def test_a_release_wakes_a_waiter(face: Face, client: Any, name: str) -> None:
    sem = client.get_semaphore(name)
    a, b = face.actor(), face.actor()
    await a(sem.try_set_permits, 1)
    await a(sem.acquire)
    waiter = asyncio.ensure_future(b(sem.try_acquire, 1, 20))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    released = time.monotonic()
    await a(sem.release)
    assert await within(10, waiter)
    assert time.monotonic() - released < 2  # woken by the message, not the 5 s re-check


@pytest.mark.parametrize(
    ("call", "args", "error"),
    [
        ("try_set_permits", (-1,), ValueError),
        ("try_set_permits", (1.5,), TypeError),
        ("acquire", (True, -5), ValueError),
        ("acquire", (False, 1), ValueError),
        ("acquire", (1,), TypeError),
        ("try_acquire", (-2,), ValueError),
        ("try_acquire", (1, -1), ValueError),
        ("release", (-1,), ValueError),
        ("add_permits", ("1",), TypeError),
    ],
)
async def test_bad_counts_change_nothing(
    face: Face, client: Any, raw: redis.Redis, name: str, *, call: str, args: Any, error: Any
) -> None:
    sem = client.get_semaphore(name)
    with pytest.raises(error):
        await face.actor()(getattr(sem, call), *args)
    assert raw.exists(name) == 0


async def test_acquire_follows_the_standard_library(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_semaphore(name)
    a = face.actor()
    assert not await a(sem.acquire, False)  # no permits yet: a single attempt fails
    await a(sem.try_set_permits, 3)
    assert await a(sem.acquire, False, permits=2)
    assert not await a(sem.acquire, True, 0.2, permits=2)  # only one left: times out
    assert await a(sem.acquire, True, timedelta(seconds=1))
    assert raw.get(name) == b"0"
    with pytest.raises(ValueError, match="permits"):
        await a(sem.acquire, permits=-1)
    with pytest.raises(TypeError, match=r"write acquire\(permits=2\)"):  # Redisson's habit
        await a(sem.acquire, 2)
    assert raw.get(name) == b"0"


async def test_never_more_holders_than_permits(face: Face, client: Any, name: str) -> None:
    sem = client.get_semaphore(name)
    await face.call(sem.try_set_permits, 3)
    inside = peak = done = 0

    if face.is_async:

        async def work() -> None:
            nonlocal inside, peak, done
            for _ in range(8):
                async with sem:
                    inside += 1
                    peak = max(peak, inside)
                    await asyncio.sleep(0.005)
                    inside -= 1
                    done += 1

    else:
        import threading

        mutex = threading.Lock()

        def work() -> None:  # type: ignore[misc]
            nonlocal inside, peak, done
            for _ in range(8):
                with sem:
                    with mutex:
                        inside += 1
                        peak = max(peak, inside)
                    time.sleep(0.005)
                    with mutex:
                        inside -= 1
                        done += 1

    actors = [face.actor() for _ in range(7)]
    await within(60, asyncio.gather(*(actor(work) for actor in actors)))
    assert done == 56
    assert 1 <= peak <= 3
    assert await face.call(sem.available_permits) == 3  # every permit is back


def test_processes_never_exceed_the_permits(real_url: str) -> None:
    from syncprims.cli.demo import run_demo

    result = run_demo(real_url, primitive="semaphore", permits=2, processes=3, threads=2, seconds=2)
    assert result.ok
    assert result.max_concurrency is not None and 1 <= result.max_concurrency <= 2
    assert result.permits_left == 2


def test_layout_and_messages(url: str, raw: redis.Redis, name: str) -> None:
    pubsub = raw_pubsub(raw)
    pubsub.subscribe(f"redisson_sc:{{{name}}}")
    with syncprims.connect(url) as client:
        sem = client.get_semaphore(name)
        sem.try_set_permits(2)
        assert raw.get(name) == b"2"
        sem.acquire()
        assert raw.get(name) == b"1"
        sem.release()
    got: list[Any] = []
    deadline = time.monotonic() + 3
    while len(got) < 2 and time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
        if message is not None:
            got.append(message["data"])
    assert got == [b"2", b"2"]  # the count after try_set, then after the release
    pubsub.close()


def test_a_cancelled_acquire_gives_its_permit_back(real_url: str, name: str) -> None:
    import syncprims.asyncio

    async def main() -> None:
        client = await syncprims.asyncio.connect(real_url)
        sem = client.get_semaphore(name)
        await sem.try_set_permits(1)
        await sem.acquire()
        for delay in (0, 0.0003, 0.001, 0.01):
            task = asyncio.ensure_future(sem.try_acquire(1, 5))
            await asyncio.sleep(delay)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await sem.release()
        await asyncio.sleep(0.3)
        assert await sem.available_permits() == 1
        await client.shutdown()

    asyncio.run(main())


# -- PermitExpirableSemaphore --------------------------------------------------------------


def timeouts_key(name: str) -> str:
    return f"{{{name}}}:timeout"


async def test_permits_are_leased_and_come_back(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    assert await a(sem.try_set_permits, 1)
    asked = time.monotonic()  # the lease runs in Redis from no earlier than this
    permit = await a(sem.acquire, lease_time=0.4)
    assert isinstance(permit, str) and len(permit) == 32
    assert raw.zscore(timeouts_key(name), bytes.fromhex(permit)) is not None  # raw 16 bytes
    assert await a(sem.acquired_permits) == 1
    assert await a(sem.available_permits) == 0
    assert await a(sem.try_acquire) is None
    start = time.monotonic()
    again = await within(10, a(sem.try_acquire, 5))  # waits for the lease to run out
    assert again is not None
    # Not before the lease ran out (counted from the request: a loaded host can spend most
    # of it before ``start``), and well within the wait.
    assert time.monotonic() - asked > 0.3 and time.monotonic() - start < 3
    assert not await a(sem.try_release, permit)  # expired: not released by us
    with pytest.raises(PermitNotHeldError) as info:
        await a(sem.release, permit)
    assert isinstance(info.value, ValueError)
    assert info.value.permit_id == permit
    await a(sem.release, again)
    assert await a(sem.available_permits) == 1


@pytest.mark.parametrize("server_time", [False, True])
async def test_a_client_clock_ahead_takes_a_leased_permit_unless_on_server_time(
    face: Face, url: str, raw: redis.Redis, name: str, server_time: bool
) -> None:
    """Redisson's leases run on each client's wall clock: a client 15 s ahead reclaims a
    10 s lease at once (two holders of one permit). On the server's clock it cannot."""
    honest = await face.connect(url)
    ahead = await face.connect(url)
    ahead._ex.wall_ms = lambda: time.time_ns() // 1_000_000 + 15_000  # its clock is off
    mine = honest.get_permit_expirable_semaphore(name, server_time=server_time)
    theirs = ahead.get_permit_expirable_semaphore(name, server_time=server_time)
    a, b = face.actor(), face.actor()
    assert await a(mine.try_set_permits, 1)
    permit = await a(mine.acquire, lease_time=10)
    second = await b(theirs.try_acquire, 0.3, 10)
    if server_time:
        assert second is None
        lease = await a(mine.get_lease_time, permit)
        assert lease is not None and 9 < lease <= 10
        seconds, micros = raw.time()
        score = raw.zscore(timeouts_key(name), bytes.fromhex(permit))
        assert score is not None
        assert abs(score - (seconds * 1000 + micros // 1000 + 10_000)) < 2_000  # server clock
        await a(mine.release, permit)
    else:
        assert second is not None  # the skew's failure, documented (docs/semaphores.md)
        await b(theirs.release, second)
    with pytest.raises(TypeError, match="server_time"):
        honest.get_permit_expirable_semaphore(name, server_time=1)


async def test_lease_updates_and_capacity(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    await a(sem.try_set_permits, 2)
    forever = await a(sem.acquire)  # no lease: never expires
    assert raw.zscore(timeouts_key(name), bytes.fromhex(forever)) == 922337203685477
    leased = await a(sem.acquire, lease_time=0.3)
    assert await a(sem.update_lease_time, leased, 30)
    await asyncio.sleep(0.5)
    assert await a(sem.acquired_permits) == 2  # the new lease kept it
    assert not await a(sem.update_lease_time, "00" * 16, 30)
    await a(sem.set_permits, 5)  # total capacity: 2 leased + 3 available
    assert await a(sem.available_permits) == 3
    await a(sem.release, forever)
    await a(sem.release, leased)
    assert await a(sem.available_permits) == 5


@pytest.mark.parametrize(
    ("bad", "error"), [("xyz", ValueError), ("ab" * 15, ValueError), (5, TypeError)]
)
async def test_bad_permit_ids(face: Face, client: Any, name: str, bad: Any, error: Any) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    with pytest.raises(error):
        await face.actor()(sem.release, bad)


def test_a_killed_holders_permit_returns_after_its_lease(real_url: str, name: str) -> None:
    code = (
        "import sys, time, syncprims\n"
        "c = syncprims.connect(sys.argv[1])\n"
        "s = c.get_permit_expirable_semaphore(sys.argv[2])\n"
        "s.try_set_permits(1)\n"
        "print(s.acquire(lease_time=1), flush=True)\n"
        "time.sleep(60)\n"
    )
    with processes.child(
        [sys.executable, "-c", code, real_url, name], stdout=subprocess.PIPE
    ) as holder:
        assert holder.stdout is not None
        assert len(holder.stdout.readline().strip()) == 32
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        with syncprims.connect(real_url) as client:
            sem = client.get_permit_expirable_semaphore(name)
            permit = sem.try_acquire(wait_time=10)
            assert permit is not None
            assert time.monotonic() - killed <= 1.0 + 0.5
            sem.release(permit)
