"""``shutdown()`` lets the releases in flight finish (within the operation timeout) and
refuses new acquisitions meanwhile, in both faces: a client shut down under load leaves no
lock held and no unlock-latch key behind (issue 28)."""

from __future__ import annotations

import asyncio
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


def _left(raw: redis.Redis, prefix: str) -> list[bytes]:
    """Keys of the test still in Redis: lock hashes and unlock latches."""
    found: list[bytes] = list(raw.scan_iter(match=f"*{prefix}*", count=1000))
    return found


async def test_asyncio_shutdown_under_load_leaves_nothing_held(redis_server: RedisServer) -> None:
    app = redis.asyncio.Redis(port=redis_server.port)
    raw = redis.Redis(port=redis_server.port)
    prefix = f"drain-{uuid.uuid4().hex[:8]}"
    client = await syncprims.asyncio.connect(app)
    release_errors: list[BaseException] = []
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
            try:
                await lock.unlock()
            except BaseException as error:
                release_errors.append(error)
                return
            pairs += 1

    tasks = [asyncio.create_task(work(i)) for i in range(1000)]
    await asyncio.sleep(1.0)
    await client.shutdown()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert release_errors == []
    assert pairs > 0 and refused == 1000
    assert _left(raw, prefix) == []
    await app.aclose()
    raw.close()


def test_blocking_shutdown_under_load_leaves_nothing_held(redis_server: RedisServer) -> None:
    app = redis.Redis(port=redis_server.port)
    raw = redis.Redis(port=redis_server.port)
    prefix = f"drain-{uuid.uuid4().hex[:8]}"
    client = syncprims.connect(app)
    release_errors: list[BaseException] = []
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
            try:
                lock.unlock()
            except BaseException as error:
                release_errors.append(error)
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(40)]
    for thread in threads:
        thread.start()
    started.wait()
    time.sleep(0.5)
    client.shutdown()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert release_errors == []
    assert len(refused) == 40
    assert _left(raw, prefix) == []
    app.close()
    raw.close()
