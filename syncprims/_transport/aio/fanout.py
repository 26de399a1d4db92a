"""The asyncio face's fan-out: scripts on several servers at once, on the caller's loop
(``docs/design.md``, "Several servers at once": each call queued on its server's shared
connection without a task or an await, [hot-9], with the server's deadline, [hot-8]; one
future woken by the slots' done-callbacks; the calls still out once ``enough`` held and
its grace, ``_protocol.quorum.grace_end``, is over left to their servers).

A call is a task instead (:meth:`AsyncServer.eval`) when its server has no shared
connection open, its script is not loaded yet (the task loads it), or its server still
finishes a call an earlier fan-out left there (a sick quorum member: a ``skip_if_busy``
call fails at once, not run; another waits for those calls first). A caller cancelled
meanwhile undoes the attempts that answered, abandons those in flight (their replies go to
``on_orphan``) and leaves a release (a call that is never skipped) to finish, as after
``enough``: one cancelled before it was written would leave its hold to the lease. A
cluster redirection comes back as a ``ClusterRedirectError`` for the executor to follow
(``cluster.follow``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from syncprims._protocol.contracts import PENDING, Call, Enough
from syncprims._protocol.quorum import grace_end
from syncprims._transport.aio.mux import Slot
from syncprims._transport.aio.server import NOSCRIPT, AsyncServer
from syncprims.errors import RedisTimeoutError, SyncPrimsError

__all__ = ["Routed", "fan_out"]

T = TypeVar("T")

Routed = tuple[AsyncServer, Call]
"""One call of a fan-out and the server it goes to."""


def fan_out(
    calls: Sequence[Routed], enough: Enough | None = None
) -> Coroutine[Any, Any, list[Any]]:
    """Run the scripts of ``calls`` at once, each on its server: the fan-out's coroutine
    itself, no layer around it ([hot-1]).

    Returns (when awaited):
        One entry per call: the reply, the ``SyncPrimsError`` it failed with, or ``PENDING``
        (only when ``enough`` stopped the wait).
    """
    return _FanOut(calls, enough).run()


class _Entry:
    """One call of a fan-out on a shared connection: its slot, and the callback of the
    slot's future, which records the outcome (a slotted object, not a closure: [hot-3])."""

    __slots__ = ("fan", "i", "server", "slot")

    def __init__(self, fan: _FanOut, i: int, server: AsyncServer, slot: Slot) -> None:
        self.fan = fan
        self.i = i
        self.server = server
        self.slot = slot

    def __call__(self, future: asyncio.Future[Any]) -> None:
        fan = self.fan
        i = self.i
        if fan.results[i] is not PENDING:
            return
        outcome = self.server.outcome(self.slot, fan.calls[i][1].context)
        if outcome is NOSCRIPT:
            fan.task(i)
        else:
            fan.settle(i, outcome)


class _FanOut:
    """One fan-out (see the module docstring)."""

    __slots__ = ("calls", "enough", "entries", "loop", "remaining", "results", "tasks", "wake")

    def __init__(self, calls: Sequence[Routed], enough: Enough | None) -> None:
        self.calls = calls
        self.enough = enough
        self.loop = asyncio.get_running_loop()
        self.results: list[Any] = [PENDING] * len(calls)
        self.entries: list[_Entry | None] = [None] * len(calls)
        self.tasks: dict[asyncio.Task[Any], int] = {}  # the calls made as tasks
        self.remaining = len(calls)
        self.wake: asyncio.Future[None] = self.loop.create_future()

    async def run(self) -> list[Any]:
        for i, (server, call) in enumerate(self.calls):
            if server.late:  # a sick or a slow server: see Call.skip_if_busy
                self._behind(i, server, call)
                continue
            slot = server.submit(call)
            if slot is None:  # no shared connection open
                self.task(i)
                continue
            entry = self.entries[i] = _Entry(self, i, server, slot)
            slot.future.add_done_callback(entry)
        # Until every call answered, or enough held and its grace is over (in this frame:
        # a coroutine of its own would be one more layer per wake-up, [hot-1]).
        loop = self.loop
        enough = self.enough
        started = loop.time()
        stop_at: float | None = None
        grace: asyncio.TimerHandle | None = None
        try:
            while self.remaining:
                if stop_at is None and enough is not None and enough(self.results):
                    stop_at = grace_end(started, loop.time())
                    grace = loop.call_at(stop_at, self.woken)
                if stop_at is not None and loop.time() >= stop_at:
                    break
                await self.wake
                self.wake = loop.create_future()
        except asyncio.CancelledError:
            self._cancelled()
            raise
        finally:
            if grace is not None:
                grace.cancel()
        self._leave_late()
        results, self.results = self.results, [None] * len(self.results)  # none settles late
        for reply in results:  # a bug, or the wrong event loop: raised
            if isinstance(reply, BaseException) and not isinstance(reply, SyncPrimsError):
                raise reply
        return results

    def woken(self) -> None:
        if not self.wake.done():
            self.wake.set_result(None)

    def settle(self, i: int, outcome: Any) -> None:
        if self.results[i] is PENDING:
            self.results[i] = outcome
            self.remaining -= 1
            self.woken()

    def task(self, i: int, coro: Coroutine[Any, Any, Any] | None = None) -> None:
        """Call ``i`` as a task (:meth:`AsyncServer.eval`, or ``coro``)."""
        server, call = self.calls[i]
        if coro is None:
            coro = server.eval(call.script_call, context=call.context, on_orphan=call.on_orphan)
        task = self.loop.create_task(coro)
        self.tasks[task] = i
        task.add_done_callback(self._done)

    def _behind(self, i: int, server: AsyncServer, call: Call) -> None:
        """Call ``i`` on a server still finishing calls a fan-out left there: skipped when
        it may be (it did not run) and an attempt is among them, else made once those are
        finished."""
        if call.skip_if_busy and server.late_skippable:
            error = RedisTimeoutError(
                f"{call.context} skipped: the server has not answered an earlier call yet",
                maybe_executed=False,
            )
            self.settle(i, error)
            return
        coro = server.eval(call.script_call, context=call.context, on_orphan=call.on_orphan)
        self.task(i, _after(list(server.late), coro))

    def _done(self, task: asyncio.Task[Any]) -> None:
        i = self.tasks.pop(task, -1)
        if i >= 0 and not task.cancelled():
            error = task.exception()
            self.settle(i, task.result() if error is None else error)

    def _cancelled(self) -> None:
        """The caller was cancelled: answered attempts are undone, attempts in flight
        abandoned (their replies go to ``on_orphan``; one not written yet never is), and a
        release left to finish."""
        as_tasks = set(self.tasks.values())  # a NOSCRIPT made again as a task already
        for i, entry in enumerate(self.entries):
            server, call = self.calls[i]
            reply = self.results[i]
            if reply is not PENDING:
                if call.on_orphan is not None and not isinstance(reply, BaseException):
                    server.hand_over(reply, call.on_orphan)
            elif entry is not None and call.skip_if_busy:
                entry.slot.future.cancel()
                entry.slot.connection.abandon(entry.slot)
            elif entry is not None and i not in as_tasks:
                self._leave_slot_late(server, entry.slot, call)
        self._end_tasks()

    def _leave_late(self) -> None:
        """After ``enough``: the calls still out finish on their servers (one answered just
        now, its outcome not recorded yet, is undone there too)."""
        as_tasks = set(self.tasks.values())  # a NOSCRIPT made again as a task already
        for i, entry in enumerate(self.entries):
            if entry is not None and self.results[i] is PENDING and i not in as_tasks:
                server, call = self.calls[i]
                self._leave_slot_late(server, entry.slot, call)
        self._end_tasks()

    def _end_tasks(self) -> None:
        """The calls made as tasks (queued behind a server's late calls, or a ``NOSCRIPT``
        made again), once the fan-out is over: an attempt still out is cancelled (not sent
        yet: never sent; sent: it undoes itself, ``on_orphan``), not left to be granted and
        undone, which kept the server busy for the next attempt; a release, or an attempt
        that answered just now, finishes late."""
        for task, i in list(self.tasks.items()):
            server, call = self.calls[i]
            if call.skip_if_busy and not task.done():
                task.cancel()
            else:
                server.leave_late(task, call.on_orphan, call.skip_if_busy)

    def _leave_slot_late(self, server: AsyncServer, slot: Slot, call: Call) -> None:
        """Leave a call still out on its shared connection to ``server``, finished by
        :func:`_finish_late` (a ``NOSCRIPT`` made again there)."""
        late = self.loop.create_task(_finish_late(server, slot, call))
        server.leave_late(late, call.on_orphan, call.skip_if_busy)


async def _finish_late(server: AsyncServer, slot: Slot, call: Call) -> Any:
    """The outcome of a call left late on its shared connection's ``slot``: its reply
    (raised if an error). A ``NOSCRIPT`` (it did not run: the script's first use on that
    server, or one restarted empty) is run again with the script loaded, unless the call
    may be skipped (an attempt that did not run took nothing). A late release whose
    ``NOSCRIPT`` was dropped here left the lock held on that master until its lease."""
    await asyncio.wait([slot.future])
    outcome = server.outcome(slot, call.context)
    if outcome is NOSCRIPT:
        if call.skip_if_busy:
            raise RedisTimeoutError(f"{call.context}: did not run", maybe_executed=False)
        return await server.eval(call.script_call, context=call.context)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def _after(earlier: Sequence[asyncio.Future[Any]], coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` once the earlier late calls on its server are finished (they end within
    the server's timeout): a release queued behind a sick server's pending call."""
    try:
        await asyncio.wait(earlier)
    except BaseException:
        coro.close()
        raise
    return await coro
