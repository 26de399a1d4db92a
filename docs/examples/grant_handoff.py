"""The RLock's one-hop grant (docs/locks.md, "Waiting"), on by default; off with
``lock_grant_handoff=False``. Both faces: a holder releases, a waiting worker gets the lock."""

import asyncio
import os
import threading
import time

import syncprims
import syncprims.asyncio

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")


def sync_face(grants: bool) -> None:
    with syncprims.connect(URL, lock_grant_handoff=grants) as client:
        lock = client.get_lock("orders:grant")
        lock.lock()
        got: list[float] = []

        def waiter() -> None:
            with lock:  # waits; the release below hands the lock over
                got.append(time.monotonic())

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.2)
        released = time.monotonic()
        lock.unlock()
        thread.join(10)
        print(f"sync, grants {grants}: handed over in {(got[0] - released) * 1000:.2f} ms")


async def asyncio_face(grants: bool) -> None:
    async with await syncprims.asyncio.connect(URL, lock_grant_handoff=grants) as client:
        lock = client.get_lock("orders:grant")
        await lock.lock()
        got: list[float] = []

        async def waiter() -> None:
            async with lock:
                got.append(time.monotonic())

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.2)
        released = time.monotonic()
        await lock.unlock()
        await asyncio.wait_for(task, 10)
        print(f"asyncio, grants {grants}: handed over in {(got[0] - released) * 1000:.2f} ms")


for grants in (True, False):
    sync_face(grants)
    asyncio.run(asyncio_face(grants))
