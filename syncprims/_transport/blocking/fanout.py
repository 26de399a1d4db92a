r"""The blocking face's fan-out: scripts on several servers at once from one thread (write
all, then read the replies as they come, one ``select``), and each server's late lane, which
finishes the calls still out when a fan-out stopped early (a RedLock's quorum).

Each call is a core :class:`~syncprims._protocol.contracts.Call` paired with the
:class:`~syncprims._transport.blocking.server.SyncServer` it goes to (the executor routes
it); the server sends the call's ``ScriptCall`` command as it is, and the late lane hands a
reply that comes after the fan-out returned to the call's ``on_orphan``.
"""

from __future__ import annotations

import logging
import math
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from syncprims._protocol.contracts import PENDING, Call, Enough, Orphan
from syncprims._protocol.quorum import grace_end
from syncprims._protocol.stepping import run
from syncprims._transport.blocking.server import SyncServer, buffered, stale_among
from syncprims.errors import RedisTimeoutError, SyncPrimsError

__all__ = ["Handoff", "LateLane", "Routed", "fan_out"]

log = logging.getLogger("syncprims.transport")

Routed = tuple[SyncServer, Call]
"""One call of a fan-out and the server it goes to."""

_LANES = threading.Lock()  # makes a server's lane once (lane_of)


def fan_out(calls: Sequence[Routed], enough: Enough | None = None) -> list[Any]:
    """Run scripts on several servers at once from one thread: write all, then read the
    replies in the order they come (``select``).

    Each reply is awaited until its own server's timeout, counted from when its command was
    sent: the whole costs the slowest server, not the sum. With ``enough``, once
    ``enough(results)`` is true the others get a grace (as long again as it took to get
    there, at least ``MIN_GRACE``; a healthy set answers within it, so nothing is left
    behind); the calls still out after it go to their servers' :class:`LateLane`, which
    reads their replies in the background and hands them to ``on_orphan``. A server whose
    lane is still busy is not written to meanwhile: a ``skip_if_busy`` call fails at once
    (``RedisTimeoutError``, not run) where the lane holds one such call already, another is
    queued in the lane and its reply awaited unless ``enough`` is already true (then
    ``PENDING``). So a frozen quorum member costs one connection and one timeout at a
    time, not one per attempt. Servers whose last call
    failed get their connection from the pool on a thread each, at once (a frozen server
    that accepts connections costs its connect timeout once, not once per such server).

    Returns:
        One entry per call: the reply, the ``SyncPrimsError`` it failed with, or ``PENDING``
        (a cluster redirection comes back as a ``ClusterRedirectError`` for the caller to
        follow).
    """
    results: list[Any] = [PENDING] * len(calls)
    todo: list[int] = []
    queued: dict[int, Handoff] = {}
    for i, (server, call) in enumerate(calls):
        lane = server.lane
        if lane is not None and lane.busy():
            if call.skip_if_busy and lane_of(server).holds_skippable():
                results[i] = RedisTimeoutError(
                    f"{call.context} skipped: {server.address} has not answered an "
                    f"earlier call yet",
                    maybe_executed=False,
                )
            else:
                queued[i] = lane_of(server).call(call, time.monotonic() + server.timeout)
        else:
            todo.append(i)
    conns = _checkout_all(calls, todo, results)
    in_flight: dict[int, Any] = {}
    deadlines: dict[int, float] = {}
    commands = {i: calls[i][1].script_call.command() for i in todo}  # re-sent on NOSCRIPT
    try:
        for i in todo:
            if i not in conns:
                continue
            server, call = calls[i]
            conn = conns.pop(i)
            try:
                server.send(conn, commands[i], call.context)
            except SyncPrimsError as error:
                server.checkin(conn)
                results[i] = error
                continue
            in_flight[i] = conn
            deadlines[i] = time.monotonic() + server.timeout
        started = time.monotonic()
        # A TLS socket may hold decrypted bytes select cannot see (``buffered``): looked
        # for only when there is one.
        tls = any([type(conn._sock) is not socket.socket for conn in in_flight.values()])
        stop_at = math.inf  # once enough: the end of the grace (see fan_out's docstring)
        while in_flight:
            if stop_at == math.inf and enough is not None and enough(results):
                stop_at = grace_end(started, time.monotonic())
            ready = _readable(in_flight, deadlines, stop_at, tls=tls)
            if ready is None:  # the grace is over: the rest finishes in the background
                break
            for i in ready:
                conn = in_flight.pop(i)
                server, call = calls[i]
                # Readable, so the reply is (nearly) all there: read it with the socket's own
                # timeout (no settimeout calls) unless most of the call's time is used up.
                left = max(0.001, deadlines[i] - time.monotonic())
                timeout = None if left > server.timeout / 2 else left
                try:
                    results[i] = server.receive(
                        conn, commands[i], call.context, call.script_call.script, timeout=timeout
                    )
                except SyncPrimsError as error:
                    results[i] = error
                finally:
                    server.checkin(conn)
        for i in list(in_flight):
            server, call = calls[i]
            lane_of(server).finish(call, in_flight.pop(i), deadlines[i])
        for i, handoff in queued.items():  # calls queued behind a busy server's lane
            if enough is not None and enough(results):
                # A reply the lane delivered already is this fan-out's (the lane gave it to
                # nobody else): dropped, a grant stayed held, unrenewed, until its lease.
                results[i] = handoff.abandon()
            else:
                results[i] = handoff.take()
    finally:
        for i, conn in [*in_flight.items(), *conns.items()]:  # interrupted: drop the rest
            calls[i][0].discard(conn)
    return results


def _readable(
    in_flight: dict[int, Any], deadlines: dict[int, float], stop_at: float, *, tls: bool
) -> list[int] | None:
    """The in-flight calls with a reply to read, or past their deadline (reading them raises
    the timeout), waiting until there is one; ``None`` when ``stop_at`` came first. ``tls``:
    whether a connection may hold bytes ``select`` cannot see."""
    if tls:
        ready = [i for i, conn in in_flight.items() if buffered(conn)]
        if ready:
            return ready
    socks = {conn._sock: i for i, conn in in_flight.items() if conn._sock is not None}
    if len(socks) < len(in_flight):  # disconnected under us: reading says why
        return [i for i, conn in in_flight.items() if conn._sock is None]
    until = min(stop_at, *(deadlines[i] for i in in_flight))
    try:
        readable, _, _ = select.select(list(socks), [], [], max(0.0, until - time.monotonic()))
    except (OSError, ValueError):  # a socket closed between the looks
        return list(in_flight)
    if readable:
        return [socks[sock] for sock in readable]
    now = time.monotonic()
    if now >= stop_at:
        return None
    return [i for i in in_flight if deadlines[i] <= now]


def _checkout_all(
    calls: Sequence[Routed], todo: Sequence[int], results: list[Any]
) -> dict[int, Any]:
    """A connection per call of ``todo``; failures go to ``results``. Kept connections are
    checked for staleness together: one ``select`` for all of them ([hot-6])."""
    conns: dict[int, Any] = {}
    sick = [i for i in todo if not calls[i][0].healthy]
    if len(sick) < 2:
        sick = []
    kept = {i: calls[i][0].take_kept() for i in todo if i not in sick}
    for i in stale_among(kept):
        calls[i][0].forget(kept.pop(i))
    for i, conn in kept.items():
        if conn is not None:
            conns[i] = conn
    if len(conns) == len(todo):
        return conns
    lock = threading.Lock()

    def take(i: int) -> None:
        server, call = calls[i]
        try:
            conn = server.checkout(call.context)
        except SyncPrimsError as error:
            results[i] = error
            return
        with lock:
            conns[i] = conn

    threads = [threading.Thread(target=take, args=(i,), daemon=True) for i in sick]
    for thread in threads:
        thread.start()
    try:
        for i in todo:
            if i not in sick and i not in conns:
                take(i)
    finally:
        for thread in threads:
            thread.join()
    return conns


def lane_of(server: SyncServer) -> LateLane:
    """``server``'s late lane, made on first use (a fan-out that never stops early makes
    none, and asks nothing of it: [hot-10])."""
    lane = server.lane
    if not isinstance(lane, LateLane):
        with _LANES:
            lane = server.lane
            if not isinstance(lane, LateLane):
                lane = server.lane = LateLane(server)
    return lane


class Handoff:
    """The result of a call queued in a :class:`LateLane`, for the fan-out that queued it."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._value: Any = PENDING
        self._abandoned = False

    def set(self, value: Any) -> bool:
        """Deliver the reply (or error); ``False`` when nobody will take it any more."""
        with self._lock:
            self._value = value
            self._done.set()
            return not self._abandoned

    def take(self) -> Any:
        """Wait (until the call's deadline) and take the reply; ``PENDING`` if it is late,
        and then it goes to the call's ``on_orphan``."""
        self._done.wait(max(0.0, self._deadline - time.monotonic()) + 0.05)
        with self._lock:
            if self._value is PENDING:
                self._abandoned = True
            return self._value

    def abandon(self) -> Any:
        """The fan-out no longer waits for it: a reply to come goes to the call's
        ``on_orphan`` (an attempt not sent yet is not sent at all). Returns the reply when
        it was delivered already (:meth:`set` returned ``True``: nobody else has it, so the
        fan-out must take it), else ``PENDING``."""
        with self._lock:
            self._abandoned = True
            return self._value

    def abandoned(self) -> bool:
        """Whether the fan-out stopped waiting for it."""
        with self._lock:
            return self._abandoned


class LateLane:
    """Finishes, on a thread of its own, the calls of one server that a fan-out stopped
    waiting for, and the calls queued behind them, in order, each within its deadline.

    A reply goes to the call's ``on_orphan``; a call past its deadline is dropped (its
    connection closed): what it may have taken expires by its lease. The thread exits when
    the lane has been empty for a second.
    """

    IDLE_EXIT = 1.0

    def __init__(self, server: SyncServer) -> None:
        self._server = server
        self._jobs: deque[tuple[Call, Any, float, Handoff | None]] = deque()
        self._cond = threading.Condition()
        self._running = False
        self._outstanding = 0
        self._skippable = 0  # of them, ``skip_if_busy`` calls (attempts)

    def busy(self) -> bool:
        """Whether calls are still being finished (the server may be sick)."""
        return self._outstanding > 0

    def holds_skippable(self) -> bool:
        """Whether a ``skip_if_busy`` call (an attempt) is among them: the next one is
        skipped, not queued (at most one attempt waits on a sick server)."""
        return self._skippable > 0

    def finish(self, call: Call, conn: Any, deadline: float) -> None:
        """Read the reply of ``call``, already sent on ``conn``, before ``deadline``."""
        self._put((call, conn, deadline, None))

    def call(self, call: Call, deadline: float) -> Handoff:
        """Send ``call`` once the calls before it are finished, and read its reply."""
        handoff = Handoff(deadline)
        self._put((call, None, deadline, handoff))
        return handoff

    def _put(self, job: tuple[Call, Any, float, Handoff | None]) -> None:
        with self._cond:
            self._jobs.append(job)
            self._outstanding += 1
            self._skippable += job[0].skip_if_busy
            if not self._running:
                self._running = True
                threading.Thread(
                    target=self._run, name=f"syncprims-late-{self._server.address}", daemon=True
                ).start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._jobs:
                    self._cond.wait(self.IDLE_EXIT)
                if not self._jobs:
                    self._running = False
                    return
                call, conn, deadline, handoff = self._jobs.popleft()
            try:
                self._finish(call, conn, deadline, handoff)
            finally:
                with self._cond:
                    self._outstanding -= 1
                    self._skippable -= call.skip_if_busy

    def _finish(self, call: Call, conn: Any, deadline: float, handoff: Handoff | None) -> None:
        server = self._server
        if conn is None and handoff is not None and call.skip_if_busy and handoff.abandoned():
            # An attempt queued behind a late call, not needed any more (the others made
            # the quorum): not sent, so nothing to undo. Sent, it would be granted and
            # undone, and keep the lane busy for the next attempt.
            return
        left = deadline - time.monotonic()
        if left <= 0:
            if conn is not None:
                server.discard(conn)
            if handoff is not None:
                handoff.set(
                    RedisTimeoutError(
                        f"{call.context}: {server.address} did not answer an earlier call in time",
                        maybe_executed=False,
                    )
                )
            return
        script_call = call.script_call
        command = script_call.command()
        try:
            if conn is None:
                conn = server.checkout(call.context)
                server.send(conn, command, call.context)
            try:
                reply = server.receive(
                    conn, command, call.context, script_call.script, timeout=left
                )
            finally:
                server.checkin(conn)
        except SyncPrimsError as error:
            if handoff is None or not handoff.set(error):
                log.debug("%s: the late call failed: %r", call.context, error)
            return
        if handoff is not None and handoff.set(reply):
            return  # its fan-out takes it
        if call.on_orphan is not None:
            try:
                run(_undo(call.on_orphan, reply))
            except Exception:
                log.exception("%s: handling a late reply failed; its lease bounds it", call.context)


async def _undo(on_orphan: Orphan, reply: Any) -> None:
    """``on_orphan(reply)`` as a coroutine for :func:`~syncprims._protocol.stepping.run` (the
    blocking face's calls never suspend, so it runs to completion on the lane's thread)."""
    await on_orphan(reply)
