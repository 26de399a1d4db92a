"""Where a handoff's time goes (the profile behind docs/design.md, "Waking waiters").

Two processes on one embedded redis-server, as the ``handoff`` benchmark: A holds an RLock,
B blocks in ``lock()``, A releases. B's ``lock()`` is timed in three parts from A's release
(``time.monotonic_ns``, one clock for both processes on Linux):

* release -> message: A's unlock script until B's subscriber thread has read the message;
* message -> wake-up: that thread until the waiting thread runs (the thread hop);
* wake-up -> acquired: the waiter's acquire script and book-keeping until ``lock()`` returns.

Both ways a grant reaches B: the message (``lock_grant_direct=False``), and the direct grant
(B's waiting thread pops its own list: "message" and "wake-up" are then both the moment its
``BLPOP`` returned, no hop). A's own ``unlock()`` call (release -> A's call returned) is
printed too.

Usage: ``.venv/bin/python scripts/handoff_timeline.py [rounds]`` (default 400).
python-redis-lock's total is printed beside it when it is installed (the ``[bench]`` extra).
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import time
from typing import Any

import syncprims
from syncprims._embedded import RedisServer
from syncprims.bench.peers import available, open_peer

NAME = "timeline:handoff"


def _open(peer: str, url: str, direct: bool) -> Any:
    """The peer's lock as the handoff benchmark builds it (syncprims: grant delivery set)."""
    if peer != "syncprims":
        return open_peer(peer, [url]).lock(NAME)
    lock = syncprims.connect(url, lock_grant_direct=direct).get_lock(NAME)

    class Bench:
        acquire, release = lock.lock, lock.unlock

    return Bench()


def _waiter(peer: str, url: str, rounds: int, direct: bool, pipe: Any) -> None:
    from syncprims._protocol.contracts import WAKE_TOKEN
    from syncprims._runtime import sync as runtime
    from syncprims._services import pubsub

    marks: dict[str, int] = {}
    dispatch = pubsub.SubscriptionTable.dispatch
    wait = runtime.SyncExecutor.wait
    wait_pushed = runtime.SyncExecutor.wait_pushed

    async def timed_wait_pushed(
        self: Any, sub: Any, key: str, timeout: float, route: str
    ) -> bytes | bool:
        popped = await wait_pushed(self, sub, key, timeout, route)
        if isinstance(popped, bytes) and popped != WAKE_TOKEN:
            marks.setdefault("message", time.monotonic_ns())
            marks.setdefault("wake", marks["message"])
        return popped

    def timed_dispatch(self: Any, reply: Any) -> None:
        if isinstance(reply, list) and reply and reply[0] == b"message":
            marks.setdefault("message", time.monotonic_ns())
        dispatch(self, reply)

    async def timed_wait(self: Any, sub: Any, timeout: float | None) -> bool:
        woken = await wait(self, sub, timeout)
        marks.setdefault("wake", time.monotonic_ns())
        return woken

    pubsub.SubscriptionTable.dispatch = timed_dispatch  # type: ignore[method-assign]
    runtime.SyncExecutor.wait = timed_wait  # type: ignore[method-assign]
    runtime.SyncExecutor.wait_pushed = timed_wait_pushed  # type: ignore[method-assign]
    lock = _open(peer, url, direct)
    out = []
    pipe.send("ready")
    for _ in range(rounds):
        pipe.recv()  # the holder holds the lock now
        marks.clear()
        lock.acquire()
        out.append((marks.get("message", 0), marks.get("wake", 0), time.monotonic_ns()))
        lock.release()
        pipe.send("done")
    pipe.send(out)


def run(
    peer: str, url: str, rounds: int, direct: bool = True
) -> list[tuple[int, int, int, int, int]]:
    """``(released, returned, message, wake, acquired)`` per round, ns (``returned``: A's
    unlock call returned)."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_waiter, args=(peer, url, rounds, direct, there), daemon=True)
    child.start()
    lock = _open(peer, url, direct)
    here.recv()
    released, returned = [], []
    for _ in range(rounds):
        lock.acquire()
        here.send("go")
        time.sleep(0.003)  # the waiter is blocked in lock() by now
        released.append(time.monotonic_ns())
        lock.release()
        returned.append(time.monotonic_ns())
        here.recv()
    marks = here.recv()
    child.join(10)
    return [(r, d, *m) for r, d, m in zip(released, returned, marks, strict=True)]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 400

    def us(values: list[int]) -> float:
        return statistics.median(values) / 1000

    with RedisServer() as server:
        for direct in (True, False):
            rows = run("syncprims", server.url, rounds, direct)
            how = "direct grant (BLPOP)" if direct else "grant message, reader thread"
            print(f"syncprims RLock, {how}, {rounds} handoffs, medians:")
            print(f"  release -> acquired  {us([a - r for r, _, _, _, a in rows]):6.0f} us")
            print(f"  release -> message   {us([m - r for r, _, m, _, _ in rows]):6.0f} us")
            print(f"  message -> wake-up   {us([w - m for _, _, m, w, _ in rows]):6.0f} us")
            print(f"  wake-up -> acquired  {us([a - w for _, _, _, w, a in rows]):6.0f} us")
            print(f"  (A's unlock call     {us([d - r for r, d, _, _, _ in rows]):6.0f} us)")
        if available("python-redis-lock"):
            rows = run("python-redis-lock", server.url, rounds)
            total = us([a - r for r, _, _, _, a in rows])
            print(f"python-redis-lock, same server: release -> acquired {total:6.0f} us")


if __name__ == "__main__":
    main()
