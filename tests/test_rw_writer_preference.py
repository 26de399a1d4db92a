"""ReadWriteLock with ``writer_preference=True`` (syncprims only; not in Redisson).

A waiting writer holds back new readers of clients that use the option, until it has had
the lock or gave up; reentrant reads and the write holder's reads are not held back;
readers without the option (Redisson's behaviour) are not held back either; a crashed
writer's entry expires. Run on every backend (fakeredis, a real server, a cluster), both
faces.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from syncprims._core.rwlock import WRITER_INTENT_MS
from syncprims._protocol.names import rw_writers_name
from tests.harness import Face, within


async def test_a_waiting_writer_holds_back_new_readers(face: Face, client: Any, name: str) -> None:
    rw = client.get_read_write_lock(name, writer_preference=True)
    read, write = rw.read_lock(), rw.write_lock()
    r1, r2, w = face.actor(), face.actor(), face.actor()
    assert await r1(read.try_lock)
    assert await r2(read.try_lock)  # no writer waits: readers share
    await r2(read.unlock)
    writer = asyncio.ensure_future(w(write.try_lock, wait_time=20))
    await asyncio.sleep(0.3)
    assert not writer.done()
    assert not await r2(read.try_lock)  # a new reader waits behind the writer
    assert await r1(read.try_lock)  # a reentrant read is not held back (no deadlock)
    await r1(read.unlock)
    late_reader = asyncio.ensure_future(r2(read.try_lock, wait_time=20))
    await asyncio.sleep(0.2)
    assert not late_reader.done()
    await r1(read.unlock)  # the last reader leaves: the writer goes first
    assert await within(10, writer)
    assert not late_reader.done()
    assert await w(read.try_lock)  # the write holder may read
    await w(read.unlock)
    await w(write.unlock)
    assert await within(10, late_reader)  # then the held-back reader
    await r2(read.unlock)


async def test_the_writer_entry_is_removed_on_success_and_on_give_up(
    face: Face, client: Any, name: str, raw: Any
) -> None:
    rw = client.get_read_write_lock(name, writer_preference=True)
    read, write = rw.read_lock(), rw.write_lock()
    r, w = face.actor(), face.actor()
    writers = rw_writers_name(name)
    assert await r(read.try_lock)
    started = time.monotonic()
    assert not await w(write.try_lock, wait_time=0.4)  # gives up
    assert time.monotonic() - started < 5
    assert raw.zcard(writers) == 0  # its entry went with it
    assert await face.actor()(read.try_lock)  # readers enter again at once
    assert raw.exists(writers) == 0
    # One attempt never registers: nothing waits.
    assert not await w(write.try_lock)
    assert raw.exists(writers) == 0


async def test_readers_without_the_option_are_not_held_back(
    face: Face, client: Any, name: str
) -> None:
    # Redisson's readers (and syncprims clients without the option) do not know the entry.
    preferring = client.get_read_write_lock(name, writer_preference=True)
    plain = client.get_read_write_lock(name)
    r1, r2, w = face.actor(), face.actor(), face.actor()
    assert await r1(preferring.read_lock().try_lock)
    writer = asyncio.ensure_future(w(preferring.write_lock().try_lock, wait_time=20))
    await asyncio.sleep(0.3)
    assert not await r2(preferring.read_lock().try_lock)
    assert await r2(plain.read_lock().try_lock)  # not held back
    await r2(plain.read_lock().unlock)
    await r1(preferring.read_lock().unlock)
    assert await within(10, writer)
    await w(preferring.write_lock().unlock)


async def test_a_crashed_writers_entry_expires(
    face: Face, client: Any, name: str, raw: Any
) -> None:
    read = client.get_read_write_lock(name, writer_preference=True).read_lock()
    r = face.actor()
    seconds, micros = raw.time()  # one reading (two could straddle a second)
    # 1.5 s: the refused try_lock below comes well within it on a loaded machine (with
    # 0.5 s, a loaded run's try_lock came after the entry had expired)
    raw.zadd(rw_writers_name(name), {"dead-client:1:write": seconds * 1000 + micros // 1000 + 1500})
    assert not await r(read.try_lock)
    started = time.monotonic()
    assert await r(read.try_lock, wait_time=5)  # waits for the entry to expire, no longer
    assert time.monotonic() - started < 4
    await r(read.unlock)
    assert WRITER_INTENT_MS <= 5000  # a crashed writer blocks readers for seconds, not more


def test_writer_preference_must_be_a_bool(url: str) -> None:
    import syncprims

    with syncprims.connect(url) as client, pytest.raises(TypeError, match="writer_preference"):
        client.get_read_write_lock("x", writer_preference=1)  # type: ignore[arg-type]
