"""ReadWriteLock: shared readers, exclusive writer, reentrancy, downgrade, no upgrade, layout.

The write side also runs the generic lock suite (tests/test_lock.py).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis

import syncprims
from syncprims import LockNotHeldError
from tests import processes
from tests.harness import Face, raw_pubsub, within


async def test_readers_share_and_exclude_writers(face: Face, client: Any, name: str) -> None:
    rw = client.get_read_write_lock(name)
    read, write = rw.read_lock(), rw.write_lock()
    r1, r2, w = face.actor(), face.actor(), face.actor()
    assert await r1(read.try_lock)
    assert await r2(read.try_lock)
    assert await r1(read.is_locked)
    assert not await w(write.is_locked)
    assert not await w(write.try_lock)
    assert not await w(write.try_lock, wait_time=0.2)
    writer = asyncio.ensure_future(w(write.try_lock, wait_time=20))
    await r1(read.unlock)
    await asyncio.sleep(0.2)
    assert not writer.done()  # one reader is still inside
    released = time.monotonic()
    await r2(read.unlock)
    assert await within(10, writer)
    assert time.monotonic() - released < 5  # woken by the read release, not the TTL
    assert await w(write.is_locked)
    assert not await r1(read.try_lock)
    await w(write.unlock)


async def test_a_write_release_lets_every_waiting_reader_in(
    face: Face, client: Any, name: str
) -> None:
    rw = client.get_read_write_lock(name)
    w = face.actor()
    await w(rw.write_lock().lock)
    readers = [face.actor() for _ in range(3)]
    waits = [asyncio.ensure_future(r(rw.read_lock().try_lock, wait_time=20)) for r in readers]
    await asyncio.sleep(0.3)
    released = time.monotonic()
    await w(rw.write_lock().unlock)
    assert await within(10, asyncio.gather(*waits)) == [True, True, True]
    assert time.monotonic() - released < 5
    for r in readers:
        await r(rw.read_lock().unlock)
    assert not await w(rw.is_exists)


async def test_reentrancy_counts_on_both_sides(face: Face, client: Any, name: str) -> None:
    rw = client.get_read_write_lock(name)
    read, write = rw.read_lock(), rw.write_lock()
    a = face.actor()
    await a(write.lock)
    await a(write.lock)
    await a(read.lock)
    await a(read.lock)
    assert await a(write.get_hold_count) == 2
    assert await a(read.get_hold_count) == 2
    await a(write.unlock)
    assert await a(write.get_hold_count) == 1
    await a(read.unlock)
    assert await a(read.get_hold_count) == 1
    await a(write.unlock)
    await a(read.unlock)
    assert not await a(rw.is_exists)


async def test_writer_downgrades_to_reader(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    rw = client.get_read_write_lock(name)
    read, write = rw.read_lock(), rw.write_lock()
    a, b = face.actor(), face.actor()
    await a(write.lock)
    await a(read.lock)
    await a(write.unlock)  # downgrade: still a reader
    assert raw.hget(name, "mode") == b"read"
    assert await a(read.is_held_by_current_thread)
    assert not await a(write.is_locked)
    assert await b(read.try_lock)  # other readers may join now
    assert not await b(write.try_lock)
    await b(read.unlock)
    await a(read.unlock)
    assert raw.exists(name) == 0


async def test_a_reader_cannot_upgrade(face: Face, client: Any, name: str) -> None:
    rw = client.get_read_write_lock(name)
    a = face.actor()
    await a(rw.read_lock().lock)
    start = time.monotonic()
    assert not await within(10, a(rw.write_lock().try_lock, wait_time=0.4))
    assert time.monotonic() - start >= 0.4
    await a(rw.read_lock().unlock)
    assert await a(rw.write_lock().try_lock)  # alone, without read holds, it can
    await a(rw.write_lock().unlock)


async def test_unlock_by_a_non_holder_raises(face: Face, client: Any, name: str) -> None:
    rw = client.get_read_write_lock(name)
    a, b = face.actor(), face.actor()
    with pytest.raises(LockNotHeldError):
        await a(rw.read_lock().unlock)
    await a(rw.read_lock().lock)
    with pytest.raises(LockNotHeldError):
        await b(rw.read_lock().unlock)
    with pytest.raises(LockNotHeldError):
        await a(rw.write_lock().unlock)  # a holds the read side only
    await a(rw.read_lock().unlock)


async def test_force_unlock_acts_on_its_side_only(face: Face, client: Any, name: str) -> None:
    rw = client.get_read_write_lock(name)
    a = face.actor()
    await a(rw.read_lock().lock)
    assert not await a(rw.write_lock().force_unlock)
    assert await a(rw.read_lock().force_unlock)
    assert not await a(rw.is_exists)


async def test_read_leases_and_zombie_readers(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    read = client.get_read_write_lock(name).read_lock()
    a, b = face.actor(), face.actor()
    await a(read.lock, lease_time=0.3)  # a "crashes": nobody renews or releases it
    await b(read.lock, lease_time=10)
    assert raw.pttl(name) > 9_000  # the hash lives as long as the longest read lease
    await asyncio.sleep(0.5)  # a's lease key expired
    await b(read.unlock)  # b leaves: a's zombie hold no longer keeps the lock
    assert raw.exists(name) == 0


def test_layout_and_messages_match_redisson(url: str, raw: redis.Redis, name: str) -> None:
    pubsub = raw_pubsub(raw)
    pubsub.subscribe(f"redisson_rwlock:{{{name}}}")
    with syncprims.connect(url) as client:
        rw = client.get_read_write_lock(name)
        me = f"{client.id}:{threading.get_ident()}"
        rw.read_lock().lock()
        rw.read_lock().lock()
        assert raw.hgetall(name) == {b"mode": b"read", me.encode(): b"2"}
        for n in (1, 2):
            key = f"{{{name}}}:{me}:rwlock_timeout:{n}"
            assert raw.get(key) == b"1"
            assert 29_000 < raw.pttl(key) <= 30_000
        rw.read_lock().unlock()
        assert raw.exists(f"{{{name}}}:{me}:rwlock_timeout:2") == 0
        rw.read_lock().unlock()
        rw.write_lock().lock()
        assert raw.hgetall(name) == {b"mode": b"write", f"{me}:write".encode(): b"1"}
        rw.write_lock().unlock()
        messages: list[Any] = []
        deadline = time.monotonic() + 3
        while len(messages) < 2 and time.monotonic() < deadline:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
            if message is not None:
                messages.append(message["data"])
        assert messages == [b"0", b"1"]  # read release, then write release
    pubsub.close()


def test_a_killed_readers_lock_frees_within_its_lease(real_url: str, name: str) -> None:
    code = (
        "import sys, time, syncprims\n"
        "c = syncprims.connect(sys.argv[1], lock_watchdog_timeout=1)\n"
        "c.get_read_write_lock(sys.argv[2]).read_lock().lock()\n"
        "print('reading', flush=True)\n"
        "time.sleep(60)\n"
    )
    with processes.child(
        [sys.executable, "-c", code, real_url, name], stdout=subprocess.PIPE
    ) as reader:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "reading"
        with syncprims.connect(real_url) as client:
            write = client.get_read_write_lock(name).write_lock()
            time.sleep(2.0)  # two watchdog timeouts: the reader's watchdog keeps it
            assert not write.try_lock()
            reader.send_signal(signal.SIGKILL)
            reader.wait(10)
            killed = time.monotonic()
            assert write.try_lock(wait_time=10)
            assert time.monotonic() - killed <= 1.0 + 0.5
            write.unlock()


def test_demo_rw_measures_reader_overlap_and_writer_exclusivity(real_url: str) -> None:
    from syncprims.cli.demo import run_demo

    result = run_demo(real_url, primitive="rw", processes=2, threads=3, seconds=2, read_ratio=0.8)
    assert result.ok
    assert result.readers_mean is not None
    assert result.readers_max is not None
    assert result.readers_max > 1  # readers did hold it together
    assert result.writer_wait_p50_ms is not None
