"""Where a handoff's time goes (the profile behind docs/design.md, "Waking waiters").

Two processes on one embedded redis-server, as the ``handoff`` benchmark: A holds an RLock,
B blocks in ``lock()``, A releases. B's ``lock()`` is timed in three parts from A's release
(``time.monotonic_ns``, one clock for both processes on Linux):

* release -> message: A's unlock script until B's subscriber thread has read the message;
* message -> wake-up: that thread until the waiting thread runs (the thread hop);
* wake-up -> acquired: the waiter's acquire script and book-keeping until ``lock()`` returns.

Usage: ``.venv/bin/python scripts/handoff_timeline.py [rounds]`` (default 400).
python-redis-lock's total is printed beside it when it is installed (the ``[bench]`` extra).
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import time
from typing import Any

from syncprims._embedded import RedisServer
from syncprims.bench.peers import available, open_peer

NAME = "timeline:handoff"


def _waiter(peer: str, url: str, rounds: int, pipe: Any) -> None:
    from syncprims._runtime import sync as runtime
    from syncprims._services import pubsub

    marks: dict[str, int] = {}
    dispatch = pubsub.SubscriptionTable.dispatch
    wait = runtime.SyncExecutor.wait

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
    lock = open_peer(peer, [url]).lock(NAME)  # as the handoff benchmark builds it
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


def run(peer: str, url: str, rounds: int) -> list[tuple[int, int, int, int]]:
    """``(released, message, wake, acquired)`` per round, ns."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_waiter, args=(peer, url, rounds, there), daemon=True)
    child.start()
    session = open_peer(peer, [url])
    lock = session.lock(NAME)
    here.recv()
    released = []
    for _ in range(rounds):
        lock.acquire()
        here.send("go")
        time.sleep(0.003)  # the waiter is blocked in lock() by now
        released.append(time.monotonic_ns())
        lock.release()
        here.recv()
    marks = here.recv()
    child.join(10)
    session.close()
    return [(r, *m) for r, m in zip(released, marks, strict=True)]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 400

    def us(values: list[int]) -> float:
        return statistics.median(values) / 1000

    with RedisServer() as server:
        rows = run("syncprims", server.url, rounds)
        print(f"syncprims RLock, {rounds} handoffs, medians:")
        print(f"  release -> acquired  {us([a - r for r, _, _, a in rows]):6.0f} us")
        print(f"  release -> message   {us([m - r for r, m, _, _ in rows]):6.0f} us")
        print(f"  message -> wake-up   {us([w - m for _, m, w, _ in rows]):6.0f} us")
        print(f"  wake-up -> acquired  {us([a - w for _, _, w, a in rows]):6.0f} us")
        if available("python-redis-lock"):
            rows = run("python-redis-lock", server.url, rounds)
            total = us([a - r for r, _, _, a in rows])
            print(f"python-redis-lock, same server: release -> acquired {total:6.0f} us")


if __name__ == "__main__":
    main()
