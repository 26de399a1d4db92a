"""Many callers on one connection: the asyncio face's multiplexed commands (Redisson's
``CommandAsyncExecutor``, Lettuce's shared connection, ioredis' auto-pipelining).

A server has a few shared connections (:class:`MuxConnection`) of its own, made with the
caller's pool's settings; a call takes the one with the fewest calls on it, appends its
packed command to its out-box and awaits its :class:`Slot`'s future. Redis's in-order
replies resolve the slots in order, parsed in the event loop's callback where
:mod:`~syncprims._transport.aio.replies` can, else by one reader task per connection. The
rules that keep it exact (one slot per call, cancellation never desynchronising the stream,
a broken connection failing every call on it, deadlines in the slots swept by the server's
:class:`~syncprims._transport.aio.deadlines.Deadlines`, a silent server's connection
retired, commands with a timeout of their own kept off): ``docs/design.md``, "Shared
connections in the asyncio face".
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from syncprims._protocol.contracts import Orphan
from syncprims._transport.aio.deadlines import Deadlines
from syncprims._transport.aio.replies import direct_replies, read_in_callback
from syncprims._transport.compat import ERRORS, adrop, aread, at_eof, write_now

__all__ = ["BrokenError", "MuxConnection", "Slot", "SlotTimeoutError", "undo_orphan"]

log = logging.getLogger("syncprims.transport")


class BrokenError(Exception):
    """The connection broke (or was closed as silent) while a call was on it.

    Attributes:
        sent: whether the call's command had been written (it may have run).
        cause: what broke it.
    """

    def __init__(self, cause: BaseException, *, sent: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.sent = sent


class _OpenerGoneError(Exception):
    """The caller opening a shared connection was cancelled: a waiting caller opens it."""


class Slot:
    """One call on a shared connection: its commands, how many replies it expects, its
    deadline, and the future its caller awaits: the reply itself for one command (one
    object less per call, which counts under thousands of tasks: [hot-4]), else the list of
    replies; an error reply is the exception value, not raised."""

    __slots__ = (
        "chunks",
        "connection",
        "count",
        "deadline",
        "future",
        "on_orphan",
        "replies",
        "sent",
        "single",
        "wire",
    )

    def __init__(
        self,
        connection: MuxConnection,
        chunks: list[Any],
        count: int,
        on_orphan: Orphan | None,
        deadline: float,
    ) -> None:
        self.connection = connection  # the shared connection it was queued on
        self.future: asyncio.Future[Any] = connection._loop.create_future()
        self.chunks = chunks
        self.count = count
        self.single = count == 1
        self.replies: list[Any] = _NO_REPLIES if count == 1 else []
        self.sent = False  # written: it may run
        # set now: the reader may get the reply before a cancelled caller runs again
        self.on_orphan = on_orphan
        self.wire: Any = None  # the wire it was written on
        self.deadline = deadline  # loop time


_NO_REPLIES: list[Any] = []  # a single slot's (never appended to)


class SlotTimeoutError(Exception):
    """A slot's deadline passed with no reply: its future ends with this; ``Slot.sent``
    says whether it may have run."""


class _Wire:
    """One physical connection: the calls written on it and awaiting replies, its reader."""

    __slots__ = ("conn", "reader", "retired", "until", "waiting")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.waiting: deque[Slot] = deque()
        self.reader: asyncio.Task[None] | None = None
        self.retired = False
        self.until = 0.0  # retired: when it is closed, late replies or not (loop time)


class MuxConnection:
    """One shared connection: an out-box, the current wire and its reader (a task, or the
    event loop's callback); a wire whose server went silent is retired, its late replies
    read for up to ``orphan_timeout`` seconds."""

    def __init__(
        self,
        make_connection: Callable[[], Any],
        loop: asyncio.AbstractEventLoop,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        orphan_timeout: float,
        deadlines: Deadlines,
    ) -> None:
        self._make = make_connection
        self._loop = loop
        self._spawn = spawn  # a background task, awaited by the server's drain()
        self._orphan_timeout = orphan_timeout
        self._deadlines = deadlines
        self._swept = False  # watched by the deadlines (see sweep())
        self._wire: _Wire | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._unsent: list[Slot] = []
        self._flush_scheduled = False
        self._wires: set[_Wire] = set()  # the current one and the retired ones still reading
        self._reopening = False
        self._closed = False

    @property
    def load(self) -> int:
        """Calls written or queued and not answered yet."""
        wire = self._wire
        return len(self._unsent) + (len(wire.waiting) if wire is not None else 0)

    async def ready(self) -> Any:
        """The connected connection (opened now if needed), for packing commands.

        Raises:
            ConnectionError etc.: opening it failed (nothing was sent).
        """
        wire = self._wire
        if wire is None or not wire.conn.is_connected:
            await self._connect()
            wire = self._wire
            assert wire is not None
        return wire.conn

    def open_conn(self) -> Any:
        """The connected connection, or ``None`` (none yet, or it closed: :meth:`ready`). A
        connection whose stream has seen the server close it (a restart) counts as closed
        even before its reader has run to find out."""
        wire = self._wire
        if wire is None or not wire.conn.is_connected or at_eof(wire.conn):
            return None
        return wire.conn

    def submit(
        self, chunks: list[Any], on_orphan: Orphan | None, deadline: float, count: int = 1
    ) -> Slot:
        """Queue ``chunks`` (``count`` commands) for the next write; await the slot's future
        for the reply (see :class:`Slot`; a broken connection raises :class:`BrokenError`,
        a ``deadline`` (loop time) passed with no reply :class:`SlotTimeoutError`, after
        which a written slot's wire is retired: the server is silent). ``on_orphan`` gets
        the last reply if the caller has gone away when it comes. On an idle connection the
        write is made at once ([hot-9])."""
        slot = Slot(self, chunks, count, on_orphan, deadline)
        self._unsent.append(slot)
        if not self._swept:
            self._swept = True
            self._deadlines.watch(self)
        if not self._flush_scheduled:
            wire = self._wire
            if wire is not None and not wire.waiting and len(self._unsent) == 1:
                self._flush()
            else:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
        return slot

    def sweep(self, now: float) -> bool:
        """End the slots past their deadline at ``now``, retiring a wire that has one
        written, and close the retired wires whose late-reply time is over; whether any
        deadline is still pending (:class:`~syncprims._transport.aio.deadlines.Swept`)."""
        pending = False
        for wire in list(self._wires):
            if wire.retired and wire.until <= now:
                self._break(wire, TimeoutError("no reply within the late-reply timeout"))
                continue
            late = False
            for slot in wire.waiting:
                if slot.future.done():
                    continue
                if slot.deadline <= now:
                    slot.future.set_exception(SlotTimeoutError())
                    late = True
                else:
                    pending = True
            if late and not wire.retired:
                self._retire(wire)
            pending = pending or wire.retired
        for slot in self._unsent:
            if slot.future.done():
                continue
            if slot.deadline <= now:
                slot.future.set_exception(SlotTimeoutError())  # never written now
            else:
                pending = True
        self._swept = pending and not self._closed
        return self._swept

    async def _connect(self) -> None:
        """Open a new wire (one opening shared by every caller that needs it; if the caller
        opening it is cancelled, a waiting caller opens it instead).

        Raises:
            ConnectionError etc.: opening failed (nothing was sent); also after
                :meth:`aclose`.
        """
        while self._connecting is not None:
            try:
                await asyncio.shield(self._connecting)
            except _OpenerGoneError:
                continue
            return
        if self._closed:
            raise ConnectionError("the client is shut down")
        opening = self._connecting = self._loop.create_future()
        old = self._wire
        if old is not None:  # closed under us: its reader says why, or already did
            self._break(old, ConnectionError("the connection closed"))
        wire = _Wire(self._make())
        try:
            await wire.conn.connect()
            if self._closed:  # shut down meanwhile
                raise ConnectionError("the client is shut down")
        except BaseException as error:
            self._spawn(adrop(wire.conn))  # a half-open socket (AUTH, HELLO...)
            gone = isinstance(error, asyncio.CancelledError)
            opening.set_exception(_OpenerGoneError() if gone else error)
            opening.exception()  # retrieved: the waiters re-raise their own copy
            raise
        finally:
            self._connecting = None
        self._wire = wire
        self._wires.add(wire)
        on_reply = functools.partial(self._on_reply, wire)
        on_lost = functools.partial(self._break, wire)
        if not read_in_callback(wire.conn, on_reply, on_lost, self._spawn):
            wire.reader = self._loop.create_task(self._read_loop(wire))
        opening.set_result(None)

    def _flush(self) -> None:
        """Write everything queued since the last write, in one ``writelines``; a call whose
        caller went away before it was written is never written. Queued behind a wire that
        was just retired (or closed), the calls wait for a new one."""
        self._flush_scheduled = False
        wire = self._wire
        if wire is None or not wire.conn.is_connected:
            if self._closed:
                self._fail_unsent(ConnectionError("the client is shut down"))
            elif not self._reopening and self._unsent:
                self._reopening = True
                self._spawn(self._reopen())
            return
        slots, self._unsent = self._unsent, []
        chunks: list[Any] = []
        waiting = wire.waiting
        for slot in slots:
            if slot.future.done():  # cancelled before it was written
                continue
            slot.sent = True
            slot.wire = wire
            waiting.append(slot)
            chunks.extend(slot.chunks)
        if not chunks:
            return
        try:
            write_now(wire.conn, chunks)
        except Exception as error:
            self._break(wire, error)

    async def _reopen(self) -> None:
        """Open a new wire for the calls queued when the last one went, then write them."""
        try:
            await self._connect()
        except BaseException as error:
            self._fail_unsent(error)
            if isinstance(error, asyncio.CancelledError):
                raise
            return
        finally:
            self._reopening = False
        self._flush()

    def _fail_unsent(self, error: BaseException) -> None:
        unsent, self._unsent = self._unsent, []
        for slot in unsent:
            _fail(slot, BrokenError(error, sent=False))

    async def _read_loop(self, wire: _Wire) -> None:
        direct = direct_replies(wire.conn)  # hiredis: no read_response layers per reply
        try:
            while wire in self._wires:
                if direct is not None:
                    reply = await direct.next()
                else:
                    try:
                        reply = await aread(wire.conn, push_request=False)
                    except ERRORS.response as error:
                        reply = error
                self._on_reply(wire, reply)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._break(wire, error)

    def _on_reply(self, wire: _Wire, reply: Any) -> None:
        """The next reply on ``wire`` (from its reader task, or from the event loop's
        callback: ``replies.read_in_callback``) goes to the oldest slot waiting. A
        retired wire closes once its last late reply is read.

        Raises:
            ConnectionError: a reply nobody asked for (the stream is out of step).
        """
        waiting = wire.waiting
        if not waiting:
            raise ConnectionError("an unexpected reply; the connection is closed")
        slot = waiting[0]
        if slot.single:
            waiting.popleft()
            self._deliver(slot, reply, reply)
        else:
            slot.replies.append(reply)
            if len(slot.replies) < slot.count:
                return
            waiting.popleft()
            self._deliver(slot, slot.replies, reply)
        if wire.retired and not waiting:
            self._break(wire, ConnectionError("retired"))  # every late reply was read

    def _deliver(self, slot: Slot, result: Any, last: Any) -> None:
        """``slot``'s ``result`` to its caller; the ``last`` reply to its ``on_orphan`` when
        the caller went away."""
        future = slot.future
        if not future.done():
            future.set_result(result)
        elif slot.on_orphan is not None:
            self._hand_over(last, slot.on_orphan)

    def _hand_over(self, reply: Any, on_orphan: Orphan) -> None:
        """Await ``on_orphan(reply)`` in the background (the call's caller went away)."""
        if isinstance(reply, Exception):
            return  # an error reply: nothing happened
        self._spawn(undo_orphan(on_orphan, reply))

    def abandon(self, slot: Slot) -> None:
        """The caller of ``slot`` went away (cancelled, so its future was cancelled too): a
        reply still to come goes to the slot's ``on_orphan`` (or is dropped); one that came
        before the caller ran again (a task's ``cancel()`` after its future completed) is
        handed over now."""
        future = slot.future
        done = future.done() and not future.cancelled() and future.exception() is None
        if done and slot.on_orphan is not None:
            result = future.result()
            self._hand_over(result if slot.single else result[-1], slot.on_orphan)

    def _retire(self, wire: _Wire) -> None:
        """New calls go to a new wire; this one reads its late replies until the late-reply
        timeout, then it is closed (by :meth:`sweep`)."""
        wire.retired = True
        wire.until = self._loop.time() + self._orphan_timeout
        if wire is self._wire:
            self._wire = None
        if not self._swept:
            self._swept = True
            self._deadlines.watch(self)

    def _break(self, wire: _Wire, error: BaseException) -> None:
        """Fail every call on ``wire`` and close it (a current wire's queued calls too)."""
        if wire not in self._wires:
            return
        self._wires.discard(wire)
        if wire is self._wire:
            self._wire = None
            self._fail_unsent(error)
        reader = wire.reader
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        waiting = list(wire.waiting)
        wire.waiting.clear()
        for slot in waiting:
            _fail(slot, BrokenError(error, sent=True))
        self._spawn(adrop(wire.conn))

    async def aclose(self) -> None:
        """Close every wire (calls still on them fail as on a break); a wire being opened
        meanwhile is closed by its opener."""
        self._closed = True
        wires = list(self._wires)
        for wire in wires:
            self._break(wire, ConnectionError("the client is shut down"))
        self._fail_unsent(ConnectionError("the client is shut down"))
        for wire in wires:
            if wire.reader is not None:
                with contextlib.suppress(BaseException):
                    await wire.reader
            await adrop(wire.conn)


async def undo_orphan(on_orphan: Orphan, reply: Any) -> None:
    """Hand the late reply of a call whose caller went away to its ``on_orphan`` (which
    releases what the call acquired); a failure is logged: the lease bounds that hold."""
    try:
        await on_orphan(reply)
    except Exception:
        log.exception("releasing what an abandoned call acquired failed; its lease bounds it")


def _fail(slot: Slot, error: BrokenError) -> None:
    if not slot.future.done():
        slot.future.set_exception(error)
