"""A client leaves nothing behind: its record and its unlock latch keys go at shutdown, at
a plain interpreter exit (blocking face), and a read-only client writes none at all."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import time
import warnings
from typing import Any

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer
from syncprims._protocol.info import record_key
from tests.harness import Face, raw_redis


def _left(url: str, name: str, client_id: str) -> list[str]:
    """The keys a client of id ``client_id`` that used the lock ``name`` left."""
    raw = raw_redis(url)
    try:
        keys = [k.decode() for k in raw.scan_iter(match=f"redisson_unlock_latch:{{{name}}}:*")]
        keys += [record_key(client_id)] if raw.exists(record_key(client_id)) else []
        keys += [name] if raw.exists(name) else []
        return keys
    finally:
        raw.close()


async def test_a_client_that_never_acquires_leaves_no_record(
    face: Face, real_url: str, name: str
) -> None:
    """A health check or a watcher connects (the record is written at connect), reads and
    listens, and shuts down: its record goes too."""
    client = await face.connect(real_url)
    raw = raw_redis(real_url)
    try:
        assert raw.exists(record_key(client.id)) == 1  # written at connect
        lock = client.get_lock(name)
        await face.call(lock.info)
        listener = await face.call(lock.add_listener, on_deleted=print)
        assert lock.remove_listener(listener)
        await face.call(client.shutdown)
        assert raw.exists(record_key(client.id)) == 0
    finally:
        raw.close()


async def test_client_record_false_writes_no_record(face: Face, real_url: str, name: str) -> None:
    client = await face.connect(real_url, client_record=False)
    raw = raw_redis(real_url)
    try:
        lock = client.get_lock(name)
        await face.call(lock.info)
        actor = face.actor()
        await actor(lock.lock)
        info = await face.call(lock.info)
        assert info.held and info.holders[0].process is None  # no record to name it by
        await actor(lock.unlock)
        assert raw.exists(record_key(client.id)) == 0
        await face.call(client.shutdown)
        assert _left(real_url, name, client.id) == []
    finally:
        raw.close()


_EXIT_PROGRAM = """
import sys, syncprims
client = syncprims.connect(sys.argv[1])
lock = client.get_lock(sys.argv[2])
for _ in range(100):
    with lock:
        pass
print(client.id, flush=True)
"""


def test_a_plain_exit_leaves_no_keys(real_url: str, name: str) -> None:
    """100 ``with lock:`` blocks and a plain exit, no ``shutdown()``: within a second of the
    exit no latch key and no record is left."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EXIT_PROGRAM), real_url, name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    client_id = done.stdout.strip()
    deadline = time.monotonic() + 1
    while (left := _left(real_url, name, client_id)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert left == []


def test_an_exit_with_redis_gone_does_not_hang() -> None:
    """Redis stops answering (SIGSTOP: the connections stay open, replies never come):
    the exit's deletes give up within their bound instead of holding the exit."""
    program = textwrap.dedent(
        """
        import os, signal, sys, syncprims
        client = syncprims.connect(sys.argv[1])
        lock = client.get_lock("exit-frozen")
        for _ in range(30):
            with lock:
                pass
        os.kill(int(sys.argv[2]), signal.SIGSTOP)
        print("frozen", flush=True)
        """
    )
    with RedisServer() as server:
        assert server.process is not None
        started = time.monotonic()
        try:
            subprocess.run(
                [sys.executable, "-c", program, server.url, str(server.process.pid)],
                capture_output=True,
                timeout=20,
                check=True,
            )
        finally:
            server.resume()
        assert time.monotonic() - started < 10


def test_an_unclosed_asyncio_client_warns_once_when_collected(real_url: str) -> None:
    async def main() -> str:
        client = await syncprims.asyncio.connect(real_url, client_record=False)
        return client.id

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        client_id = asyncio.run(main())
        gc.collect()
    mine = [w for w in seen if issubclass(w.category, ResourceWarning) and client_id in str(w)]
    assert len(mine) == 1, [str(w.message) for w in seen]
    assert "shutdown()" in str(mine[0].message)


def test_a_shut_down_asyncio_client_does_not_warn(real_url: str) -> None:
    async def main() -> Any:
        async with await syncprims.asyncio.connect(real_url) as client:
            return client.id

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        client_id = asyncio.run(main())
        gc.collect()
    assert [w for w in seen if client_id in str(w.message)] == []
