"""Mutual exclusion under load: many processes, threads and tasks on one lock; bounded time.

Invariants only (no speed is asserted): a non-atomic read-increment-write of a Redis counter
inside the lock never loses an update, and no two hold intervals overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
import uuid
from typing import Any

import pytest
import redis

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer
from syncprims.bench.history import Hold, analyse
from syncprims.cli.demo import run_demo
from tests import processes

pytestmark = pytest.mark.stress


@pytest.mark.parametrize("primitive", ["lock", "fair", "rw"])
def test_processes_by_threads(redis_server: RedisServer, primitive: str) -> None:
    result = run_demo(redis_server.url, primitive=primitive, processes=4, threads=3, seconds=3)
    assert result.acquisitions > 100
    assert result.overlaps == 0
    assert result.ok  # counter == critical sections that write (all of them but rw reads)
    assert result.counter == (result.acquisitions if result.writes is None else result.writes)
    assert result.handoffs > 0


def _sync_worker(url: str, name: str, worker: int, seconds: float, out: Any) -> None:
    import threading

    client = syncprims.connect(url)
    raw = redis.Redis.from_url(url)
    holds: list[tuple[int, int, int, int]] = []
    lock_objects = threading.Lock()

    def run(thread: int) -> None:
        lock = client.get_lock(name)
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            # mix the ways of acquiring: lock(), try_lock with a wait, and a short lease
            if thread == 0:
                lock.lock()
            elif not lock.try_lock(wait_time=2, lease_time=5 if thread == 1 else None):
                continue
            acquired = time.monotonic_ns()
            raw.set(f"{name}:n", int(raw.get(f"{name}:n") or 0) + 1)
            released = time.monotonic_ns()
            lock.unlock()
            with lock_objects:
                holds.append((worker, thread, acquired, released))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(holds)
    client.shutdown()


def _async_worker(url: str, name: str, worker: int, seconds: float, out: Any) -> None:
    async def main() -> list[tuple[int, int, int, int]]:
        client = await syncprims.asyncio.connect(url)
        raw = redis.asyncio.Redis.from_url(url)
        holds: list[tuple[int, int, int, int]] = []

        async def run(task: int) -> None:
            lock = client.get_lock(name)
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                async with lock:
                    acquired = time.monotonic_ns()
                    await raw.set(f"{name}:n", int(await raw.get(f"{name}:n") or 0) + 1)
                    released = time.monotonic_ns()
                holds.append((worker, 100 + task, acquired, released))

        await asyncio.gather(*(run(t) for t in range(6)))
        await raw.aclose()
        await client.shutdown()
        return holds

    out.put(asyncio.run(main()))


def test_a_mixed_fleet_of_sync_and_asyncio_clients(redis_server: RedisServer) -> None:
    url, name = redis_server.url, f"stress:{uuid.uuid4().hex[:8]}"
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    seconds = 3.0
    procs = [
        ctx.Process(target=_sync_worker, args=(url, name, 0, seconds, out)),
        ctx.Process(target=_sync_worker, args=(url, name, 1, seconds, out)),
        ctx.Process(target=_async_worker, args=(url, name, 2, seconds, out)),
    ]
    with processes.ending(procs):
        for p in procs:
            p.start()
        records = [out.get(timeout=90) for _ in procs]
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    holds = [Hold(*h) for batch in records for h in batch]
    overlaps, handoffs = analyse(holds)
    raw = redis.Redis.from_url(url)
    assert int(raw.get(f"{name}:n") or 0) == len(holds)
    raw.close()
    assert overlaps == 0
    assert len(holds) > 50
    assert len({h.worker for h in holds}) == 3  # every process got the lock
    assert handoffs


def test_red_lock_across_processes_on_five_masters() -> None:
    with contextlib.ExitStack() as stack:  # each server stopped, even if a later one fails
        servers = [stack.enter_context(RedisServer()) for _ in range(5)]
        result = run_demo(
            [s.url for s in servers], primitive="redlock", processes=3, threads=2, seconds=3
        )
    assert result.acquisitions > 20
    assert result.overlaps == 0
    assert result.counter == result.acquisitions
    assert result.quorum_lost == 0
