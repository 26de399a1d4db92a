"""The asyncio transport's deadlines: one timer per server for every call on it ([hot-8]).

``asyncio.timeout`` arms a timer per call. Instead each server's :class:`Deadlines` keeps
the deadlines of its calls and one sweeper timer, armed only while one is pending, that runs
every quarter of the reply timeout (at most every 0.25 s); a call ends at most that long
after its deadline. Two kinds of deadline, one mechanism:

* **An await in a task** (a call on a pooled connection, the late read of an abandoned one,
  the opening of a shared connection): :meth:`Deadlines.start` registers the current task;
  the sweep cancels it once its deadline has passed, and :meth:`Deadlines.timed_out` turns
  that cancellation into a timeout the way ``asyncio.timeout`` does (``Task.uncancel``),
  while a cancellation someone else asked for still propagates.
* **A call on a shared connection** (:mod:`~syncprims._transport.aio.mux`): its deadline
  lives in its slot, with no task and no entry here; the sweep asks each connection that
  has such slots (:meth:`Deadlines.watch`) to end those past it (:class:`Swept`).

A client of the asyncio face belongs to the event loop it was created on, as redis-py's
asyncio clients do (:func:`bind_loop`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

__all__ = ["Deadlines", "Swept", "bind_loop"]


def bind_loop(loop: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
    """The running loop, which must be ``loop`` when one is given.

    Raises:
        RuntimeError: called from another event loop than the client's.
    """
    running = asyncio.get_running_loop()
    if loop is not None and running is not loop:
        raise RuntimeError(
            "this syncprims.asyncio client belongs to another event loop (the one it was "
            "created on); create a client per event loop"
        )
    return running


class Swept(Protocol):
    """What keeps deadlines of its own for :class:`Deadlines` to sweep (a shared
    connection's slots)."""

    def sweep(self, now: float) -> bool:
        """End what is past its deadline at ``now`` (loop time); whether any deadline is
        still pending (``False``: no longer swept until watched again)."""


class Deadlines:
    """The deadlines of one server's calls, with one sweeper timer.

    Args:
        loop: the client's event loop.
        timeout: the server's reply timeout, seconds (the sweep runs every quarter of it,
            at most every 0.25 s).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop = loop
        self._timeout = timeout
        self._period = min(timeout / 4, 0.25)
        self._calls: dict[int, tuple[float, asyncio.Task[Any], int]] = {}
        self._expired: set[int] = set()
        self._watched: set[Swept] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._next = 0

    def start(self, timeout: float | None = None) -> int:
        """Register an await of the current task, ending ``timeout`` seconds from now (the
        server's reply timeout by default); returns its key for :meth:`finish`."""
        task = asyncio.current_task(self._loop)
        assert task is not None
        self._next += 1
        key = self._next
        limit = self._timeout if timeout is None else timeout
        self._calls[key] = (self._loop.time() + limit, task, task.cancelling())
        if self._timer is None:
            self._timer = self._loop.call_later(min(self._period, limit), self._sweep)
        return key

    def finish(self, key: int) -> None:
        """Unregister an await of :meth:`start`."""
        self._calls.pop(key, None)
        self._expired.discard(key)

    def timed_out(self, key: int) -> bool:
        """After a ``CancelledError``: whether it came from the deadline alone.

        If so, the cancellation is withdrawn (``uncancel``) and the caller raises
        ``TimeoutError``; a cancellation requested by someone else still propagates.
        """
        if key not in self._expired:
            return False
        entry = self._calls.get(key)
        task = asyncio.current_task(self._loop)
        assert task is not None
        baseline = entry[2] if entry is not None else 0
        return task.uncancel() <= baseline

    def watch(self, swept: Swept) -> None:
        """Sweep ``swept`` from now on, until its :meth:`Swept.sweep` says nothing is
        pending."""
        self._watched.add(swept)
        if self._timer is None:
            self._timer = self._loop.call_later(self._period, self._sweep)

    def _sweep(self) -> None:
        self._timer = None
        now = self._loop.time()
        for key, (deadline, task, _) in list(self._calls.items()):
            if deadline <= now and key not in self._expired:
                self._expired.add(key)
                task.cancel()
        for swept in list(self._watched):
            if not swept.sweep(now):
                self._watched.discard(swept)
        if self._calls or self._watched:
            self._timer = self._loop.call_later(self._period, self._sweep)

    def close(self) -> None:
        """Stop the sweeper (shutdown: the shared connections are closed)."""
        self._watched.clear()
        if self._timer is not None and not self._calls:
            self._timer.cancel()
            self._timer = None
