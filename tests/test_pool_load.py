"""Load is not an error: a full connection pool makes a call wait for a connection within
its timeout (``connections.PoolExhaustedError``), in both faces."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer

pytestmark = pytest.mark.real


def test_a_full_pool_is_waited_for(redis_server: RedisServer) -> None:
    # Two connections for 16 threads on distinct names: calls wait for a free connection.
    app = redis.Redis(port=redis_server.port, max_connections=2)
    failures: list[BaseException] = []
    prefix = f"load:{uuid.uuid4().hex}"
    with syncprims.connect(app) as client:

        def work(i: int) -> None:
            lock = client.get_lock(f"{prefix}:{i}")
            try:
                for _ in range(20):
                    lock.lock(lease_time=10)
                    lock.unlock()
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert failures == []
    app.close()


def test_a_full_pool_past_the_timeout_is_a_clear_error(redis_server: RedisServer) -> None:
    app = redis.Redis(port=redis_server.port, max_connections=1)
    with syncprims.connect(app, timeout=0.3, retry_attempts=0) as client:
        transport: Any = client._ex.transport
        while transport._idle:  # syncprims keeps none between calls...
            app.connection_pool.release(transport._idle.pop())
        held = app.connection_pool.get_connection()  # ...and the application holds the one
        try:
            with pytest.raises(syncprims.RedisConnectionError, match="no free connection") as info:
                client.get_lock(f"load:{uuid.uuid4().hex}").try_lock(lease_time=5)
            assert not info.value.maybe_executed
        finally:
            app.connection_pool.release(held)
    app.close()


async def test_asyncio_pooled_calls_wait_for_a_full_pool(redis_server: RedisServer) -> None:
    app = redis.asyncio.Redis(port=redis_server.port, max_connections=2)
    prefix = f"load:{uuid.uuid4().hex}"
    failures: list[BaseException] = []
    async with await syncprims.asyncio.connect(app, shared_connections=0) as client:

        async def work(i: int) -> None:
            lock = client.get_lock(f"{prefix}:{i}")
            try:
                for _ in range(10):
                    await lock.lock(lease_time=10)
                    await lock.unlock()
            except Exception as error:
                failures.append(error)

        await asyncio.wait_for(asyncio.gather(*(work(i) for i in range(20))), 120)
    assert failures == []
    await app.aclose()


def test_the_applications_own_pool_inside_the_lock(redis_server: RedisServer) -> None:
    """60 threads on ``redis.Redis(max_connections=20)`` update a counter under one lock,
    with the application's own GET/SET on the same pool: syncprims holds at most its share
    of the pool (a quarter: 5), waiting threads hold none of it, the count is exact."""
    app = redis.Redis(port=redis_server.port, max_connections=20)
    counter = f"load:{uuid.uuid4().hex}:count"
    app.set(counter, 0)
    failures: list[BaseException] = []
    peak = 0
    with syncprims.connect(app) as client:
        transport: Any = client._ex.transport
        assert transport.share == 5
        lock = client.get_lock(f"load:{uuid.uuid4().hex}")

        def work() -> None:
            try:
                for _ in range(5):
                    with lock:
                        value = int(app.get(counter) or 0)
                        app.set(counter, value + 1)
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=work) for _ in range(60)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            peak = max(peak, transport._pooled)
            time.sleep(0.002)
        for thread in threads:
            thread.join(120)
    assert failures == []
    assert int(app.get(counter) or 0) == 300
    assert 0 < peak <= 5
    app.close()
