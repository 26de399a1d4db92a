"""``shutdown()`` lets the releases in flight finish (within the operation timeout), wakes
the waiters, which give up cleanly (a grant made to one meanwhile is given back), and refuses
new acquisitions, in both faces: a client shut down under load leaves no lock held and no
unlock-latch key behind (issue 28). An unlock begun after ``shutdown()`` was called may be
refused (``ClientClosedError``); its lock is left to its lease, as documented."""

from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid

import pytest
import redis
import redis.asyncio

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer

pytestmark = pytest.mark.real


def _left(raw: redis.Redis, prefix: str, names: int) -> list[str]:
    """What the test left that outlives a moment: a lock still held (its hash), an unlock
    latch (16 minutes). Waiters' registrations, cut short by the shutdown, expire within
    seconds and are not counted."""
    found = [f"{prefix}:{i}" for i in range(names) if raw.exists(f"{prefix}:{i}")]
    found += [key.decode() for key in raw.scan_iter(match=f"redisson_unlock_latch:{{{prefix}*")]
    return found


async def test_asyncio_shutdown_under_load_leaves_nothing_held(redis_server: RedisServer) -> None:
    app = redis.asyncio.Redis(port=redis_server.port)
    raw = redis.Redis(port=redis_server.port)
    prefix = f"drain-{uuid.uuid4().hex[:8]}"
    client = await syncprims.asyncio.connect(app)
    release_errors: list[BaseException] = []
    late: set[str] = set()  # unlocks begun after shutdown() was called: may be refused
    shutdown_at = math.inf
    refused = 0
    pairs = 0

    async def work(i: int) -> None:
        nonlocal refused, pairs
        lock = client.get_lock(f"{prefix}:{i % 50}")
        while True:
            try:
                await lock.lock(lease_time=60)
            except syncprims.ClientClosedError:
                refused += 1
                return
            await asyncio.sleep(0.001)
            begun = time.monotonic()
            try:
                await lock.unlock()
            except syncprims.ClientClosedError as error:
                if begun < shutdown_at:
                    release_errors.append(error)
                late.add(lock.name)
                return
            except BaseException as error:
                release_errors.append(error)
                return
            pairs += 1

    tasks = [asyncio.create_task(work(i)) for i in range(1000)]
    await asyncio.sleep(1.0)
    deadline = time.monotonic() + 20
    while not pairs and time.monotonic() < deadline:  # a loaded host: under way first
        await asyncio.sleep(0.05)
    shutdown_at = time.monotonic()
    await client.shutdown()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert release_errors == [], release_errors
    assert pairs > 0 and refused + len(late) == 1000
    left = [key for key in _left(raw, prefix, 50) if key not in late]
    assert left == [], left
    await app.aclose()
    raw.close()


def test_blocking_shutdown_under_load_leaves_nothing_held(redis_server: RedisServer) -> None:
    app = redis.Redis(port=redis_server.port)
    raw = redis.Redis(port=redis_server.port)
    prefix = f"drain-{uuid.uuid4().hex[:8]}"
    client = syncprims.connect(app)
    release_errors: list[BaseException] = []
    late: set[str] = set()  # unlocks begun after shutdown() was called: may be refused
    shutdown_at = [math.inf]
    refused: list[int] = []
    started = threading.Barrier(41)

    def work(i: int) -> None:
        lock = client.get_lock(f"{prefix}:{i % 10}")
        started.wait()
        while True:
            try:
                lock.lock(lease_time=60)
            except syncprims.ClientClosedError:
                refused.append(i)
                return
            time.sleep(0.001)
            begun = time.monotonic()
            try:
                lock.unlock()
            except syncprims.ClientClosedError as error:
                if begun < shutdown_at[0]:
                    release_errors.append(error)
                late.add(lock.name)
                return
            except BaseException as error:
                release_errors.append(error)
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(40)]
    for thread in threads:
        thread.start()
    started.wait()
    time.sleep(0.5)
    shutdown_at[0] = time.monotonic()
    client.shutdown()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert release_errors == [], release_errors
    assert len(refused) + len(late) == 40
    left = [key for key in _left(raw, prefix, 10) if key not in late]
    assert left == [], left
    app.close()
    raw.close()
