"""Single-attempt calls on one server through ``redis.asyncio``: two paths, one deadline
mechanism.

* **Shared connections** (:mod:`~syncprims._transport.aio.mux`, ``Config.shared_connections``
  per server): every call without a timeout of its own. The call packs its command, queues
  it on the connection with the fewest calls and awaits its slot: no connection, checkout
  or task per call, and on an idle connection the write goes at once ([hot-9]).
* **A pooled connection per call**: a script with ``WAIT`` behind it, a command with a
  timeout of its own, and every call when ``shared_connections`` is 0. Connections come from
  the redis-py pool the client was built on (for a cluster node, the node's own connection
  list), so the caller's settings apply; up to 8 stay checked out between calls ([hot-7]).

Each call is one attempt, with replies as bytes whatever ``decode_responses``
(``docs/design.md``, "One attempt per command"); every use of a connection goes through
:mod:`syncprims._transport.compat`, which hides where redis-py versions differ. Deadlines
are the server's :class:`~syncprims._transport.aio.deadlines.Deadlines` (in the slot of a
shared call; for a task's await on a pooled connection): no timer per call.

Cancellation safety: when the caller is cancelled (or times out) while a reply is in flight
and it passed ``on_orphan``, the reply still comes to ``on_orphan`` (the shared connection's
slot keeps it; a pooled connection is handed to a background task that reads it, the
hiredis parser resuming a read cut short by cancellation): a lock acquired by an abandoned
call is released that way (why only this server takes ``on_orphan``: the module
:mod:`syncprims._transport.server`).

The fan-out over several servers is :mod:`~syncprims._transport.aio.fanout`, which queues
its calls on this server's shared connections (:meth:`AsyncServer.submit`) and leaves the
calls it stopped waiting for here (:meth:`AsyncServer.leave_late`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
from asyncio import get_running_loop
from collections.abc import Coroutine
from typing import Any

from syncprims._protocol.contracts import Call, Orphan, ScriptCall, Then
from syncprims._protocol.scripts import Script
from syncprims._protocol.wire import pack
from syncprims._transport.aio.deadlines import Deadlines, bind_loop
from syncprims._transport.aio.mux import (
    BrokenError,
    MuxConnection,
    Slot,
    SlotTimeoutError,
    undo_orphan,
)
from syncprims._transport.cluster import ClusterRouter
from syncprims._transport.compat import (
    ERRORS,
    PoolExhaustedError,
    adrop,
    agive,
    aread,
    astale,
    atake,
    is_plain_pool,
    own_connection,
)
from syncprims._transport.errors import translate
from syncprims._transport.replicas import ReplicaCount
from syncprims.errors import ClientClosedError, RedisConnectionError, SyncPrimsError

__all__ = ["NOSCRIPT", "AsyncRouter", "AsyncServer"]

log = logging.getLogger("syncprims.transport")

_IDLE_CAP = 8  # connections a server keeps checked out between calls [hot-7]
_NOTHING: Any = object()  # no reply read yet
_ASKING = pack(("ASKING",))
_LOAD = operator.attrgetter("load")  # a shared connection's calls: the fewest is picked


class _NoScript:
    """The type of :data:`NOSCRIPT`."""

    def __repr__(self) -> str:
        return "NOSCRIPT"


NOSCRIPT = _NoScript()
"""A fan-out's call found its script not loaded (it did not run: :meth:`AsyncServer.eval`
loads it)."""


class AsyncServer:
    """Calls on one server (or sentinel-managed master, or cluster node) through a
    ``redis.asyncio`` pool.

    Args:
        pool: the pool (``redis.asyncio.ConnectionPool`` of any kind, or a cluster's
            ``NodePool``).
        address: where the server is, for messages.
        timeout: the longest a call may take, seconds (connection, write and reply).
        orphan_timeout: the longest to wait for the late reply of an abandoned call, seconds.
        loop: the client's event loop.
        shared: connections of its own that carry every call without a timeout of its own
            (:mod:`syncprims._transport.aio.mux`); 0: every call takes a pooled connection.
    """

    def __init__(
        self,
        pool: Any,
        *,
        address: str,
        timeout: float,
        orphan_timeout: float,
        loop: asyncio.AbstractEventLoop | None,
        shared: int = 0,
    ) -> None:
        self.pool = pool
        self._shared = shared
        self._mux: list[MuxConnection] | None = None  # the shared connections
        self.address = address
        self.timeout = timeout
        self._orphan_timeout = max(timeout, orphan_timeout)
        self._loop = loop
        self._deadlines: Deadlines | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.late: set[asyncio.Future[Any]] = set()  # fan-out calls left here (leave_late)
        self.late_skippable = 0  # of them, skip_if_busy calls (attempts)
        self._closed = False
        # Connections kept checked out between calls, as the blocking server does and for
        # the same reason [hot-7]: only over a plain redis.asyncio ConnectionPool.
        self._idle: list[Any] = []
        self._idle_cap = _IDLE_CAP if is_plain_pool(pool) else 0
        self.replicas = ReplicaCount()  # its master's, for lock_synced_replicas="auto"

    def _translate(self, error: BaseException, context: str, *, sent: bool) -> SyncPrimsError:
        """``translate`` with this server's address and reply timeout."""
        return translate(
            error, context=context, address=self.address, timeout=self.timeout, sent=sent
        )

    def _bind(self) -> Deadlines:
        """This server's deadlines, on the running loop (which must be the client's)."""
        loop = bind_loop(self._loop)
        deadlines = self._deadlines
        if deadlines is None or self._loop is None:
            self._loop = loop
            deadlines = self._deadlines = Deadlines(loop, self.timeout)
        return deadlines

    def _multiplexer(self) -> list[MuxConnection]:
        mux = self._mux
        if mux is None:
            deadlines = self._bind()
            pool = self.pool
            loop = self._loop
            assert loop is not None
            mux = self._mux = [
                MuxConnection(
                    lambda: own_connection(pool),
                    loop,
                    self._spawn,
                    self._orphan_timeout,
                    deadlines,
                )
                for _ in range(self._shared)
            ]
        return mux

    # -- calls --------------------------------------------------------------------------------

    def eval(
        self,
        call: ScriptCall,
        *,
        context: str,
        on_orphan: Orphan | None = None,
        asking: bool = False,
    ) -> Coroutine[Any, Any, Any]:
        """:meth:`~syncprims._transport.server.NodeServer.eval`: the coroutine of the shared
        or the pooled path itself, no layer around it ([hot-1]). ``on_orphan`` gets the reply
        if the caller goes away while it is out (cancelled, or past its deadline)."""
        if self._shared:  # packed here: the frame keeps no command tuple [hot-4]
            chunks = _ASKING + pack(call.command()) if asking else pack(call.command())
            return self._on_shared(chunks, 2 if asking else 1, context, on_orphan, call.script)
        return self._pooled(
            call.command(), context, on_orphan=on_orphan, script=call.script, asking=asking
        )

    def command(
        self,
        *args: str | int,
        context: str,
        route: str | None = None,
        timeout: float | None = None,
        asking: bool = False,
    ) -> Coroutine[Any, Any, Any]:
        """Run one plain command once (``route``: the key whose node runs it: every key is on
        this server; ``timeout``: seconds for the whole call instead of the usual, on a pooled
        connection: a command Redis may block). Raises as :meth:`eval`."""
        if self._shared and timeout is None:
            chunks = _ASKING + pack(args) if asking else pack(args)
            return self._on_shared(chunks, 2 if asking else 1, context, None, None)
        return self._pooled(args, context, asking=asking, timeout=timeout)

    async def eval_then(
        self,
        call: ScriptCall,
        then: Then,
        *,
        context: str,
        on_orphan: Orphan | None = None,
        asking: bool = False,
    ) -> tuple[Any, Any]:
        """:meth:`~syncprims._transport.server.NodeServer.eval_then`, on one pooled
        connection; the call may take ``then.timeout`` longer than the
        usual timeout. A caller cancelled while ``then``'s reply is in flight hands the
        script's reply to ``on_orphan``."""
        reply, after = await self._pooled(
            call.command(),
            context,
            on_orphan=on_orphan,
            script=call.script,
            asking=asking,
            timeout=self.timeout + then.timeout,
            then=tuple(then.command),
        )
        return reply, after

    async def _on_shared(
        self,
        chunks: list[bytes],
        count: int,
        context: str,
        on_orphan: Orphan | None,
        script: Script | None,
    ) -> Any:
        """One call on a shared connection: ``chunks``, ``count`` commands (2 after
        ``ASKING``), queued in a slot whose deadline the server's :class:`Deadlines` keeps
        ([hot-8]); a ``NOSCRIPT`` (it did not run) loads the script and queues the call
        again, within the same deadline."""
        if self._closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        loop = self._loop
        if loop is None or get_running_loop() is not loop:
            self._bind()  # another loop raises; after a fork, binds the running one
            loop = get_running_loop()
        mux = self._mux or self._multiplexer()
        connection = mux[0] if len(mux) == 1 else min(mux, key=_LOAD)
        deadline = loop.time() + self.timeout
        if connection.open_conn() is None:
            await self._open(connection, context, deadline)
        slot = connection.submit(chunks, on_orphan, deadline, count)
        loading = False  # the slot is the SCRIPT LOAD a NOSCRIPT asked for
        while True:
            try:
                reply = await slot.future
            except BrokenError as broken:
                sent = broken.sent and not loading
                raise self._translate(broken.cause, context, sent=sent) from broken.cause
            except SlotTimeoutError:
                sent = slot.sent and not loading
                raise self._translate(TimeoutError(), context, sent=sent) from None
            except asyncio.CancelledError:
                connection.abandon(slot)  # a slot never written is never written later
                raise
            if loading:  # the script is loaded now: the call again
                if isinstance(reply, Exception):
                    raise self._translate(reply, context, sent=False) from reply
                loading = False
                slot = connection.submit(chunks, on_orphan, deadline, count)
                continue
            if count == 2:
                asked, reply = reply
                if isinstance(asked, Exception):
                    raise self._translate(asked, context, sent=True) from asked
            if not isinstance(reply, Exception):
                return reply
            if script is not None and isinstance(reply, ERRORS.no_script):
                loading, source, script = True, script.source, None  # loaded once at most
                slot = connection.submit(pack(("SCRIPT", "LOAD", source)), None, deadline)
                continue
            raise self._translate(reply, context, sent=True) from reply

    async def _open(self, connection: MuxConnection, context: str, deadline: float) -> None:
        """Open ``connection``'s wire for a call that found none open, within the call's
        ``deadline`` (loop time).

        Raises:
            TransportError: it could not be opened in time (``maybe_executed`` false).
        """
        deadlines = self._bind()
        key = deadlines.start(max(0.0, deadline - get_running_loop().time()))
        try:
            await connection.ready()
        except asyncio.CancelledError:
            if deadlines.timed_out(key):
                raise self._translate(TimeoutError(), context, sent=False) from None
            raise
        except ERRORS.failures as error:
            raise self._translate(error, context, sent=False) from error
        finally:
            deadlines.finish(key)

    async def _pooled(
        self,
        command: tuple[Any, ...],
        context: str,
        *,
        on_orphan: Orphan | None = None,
        script: Script | None = None,
        asking: bool = False,
        timeout: float | None = None,
        then: tuple[Any, ...] | None = None,
    ) -> Any:
        """One call on a pooled connection; with ``then`` (:meth:`eval_then`), ``(reply,
        then's reply or error)``. Its deadline is the current task's, in :class:`Deadlines`."""
        if self._closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        deadlines = self._bind()
        key = deadlines.start(timeout)
        conn: Any = None
        keep = True  # give the connection back to the pool afterwards
        sent = False
        first: Any = _NOTHING  # with then: the script's reply, once read
        try:
            try:
                conn = self._idle.pop() if self._idle else await self._take()
                if await astale(conn):
                    # Closed by the server (a restart) or holding unread data. redis-py 8's
                    # pool makes this check but skips its verdict while its maintenance
                    # notifications are "auto" (the default); the command would then be lost
                    # after it was sent, which an acquire may not retry. No syscall here: the
                    # stream already knows (tests/test_redis_py_fit.py shows the pool's miss).
                    await conn.disconnect()
                    await conn.connect()
                prefix = _ASKING if asking else []
                behind = pack(then) if then is not None else []
                await conn.send_packed_command(prefix + pack(command) + behind, check_health=False)
                sent = True
                if asking:
                    await self._read(conn)
                try:
                    reply = await self._read(conn)
                except ERRORS.no_script:
                    assert script is not None
                    sent = False  # NOSCRIPT: it did not run
                    if then is not None:  # then ran after the NOSCRIPT: drop its reply
                        await self._skip(conn)
                    await conn.send_command("SCRIPT", "LOAD", script.source, check_health=False)
                    await self._read(conn)
                    if asking:
                        await conn.send_command("ASKING", check_health=False)
                        await self._read(conn)
                    await conn.send_packed_command(pack(command) + behind, check_health=False)
                    sent = True
                    reply = await self._read(conn)
                except ERRORS.response:
                    if then is not None:  # an error reply: then's reply still comes
                        await self._skip(conn)
                    raise
                if then is None:
                    return reply
                first = reply
                return reply, await self._read_then(conn, context)
            except asyncio.CancelledError:
                timed_out = deadlines.timed_out(key)
                if first is not _NOTHING and timed_out:  # then's reply did not come in time
                    await adrop(conn)
                    late = self._translate(TimeoutError(), context, sent=True)
                    return first, late
                if conn is not None and sent and on_orphan is not None:
                    keep = False
                    if first is _NOTHING:
                        self._spawn(self._finish_orphan(conn, on_orphan, skip=then is not None))
                    else:  # only then's reply is missing: hand the script's over
                        await adrop(conn)
                        await self._release(conn)
                        self.hand_over(first, on_orphan)
                if timed_out:
                    raise TimeoutError from None
                raise
        except ERRORS.response as error:
            raise self._translate(error, context, sent=sent) from error
        except BaseException as error:
            if keep and conn is not None:
                await adrop(conn)
            if isinstance(error, ERRORS.failures):
                raise self._translate(error, context, sent=sent) from error
            raise
        finally:
            deadlines.finish(key)
            if keep and conn is not None:
                await self._release(conn)

    async def _take(self) -> Any:
        """A pooled connection; a full pool is load, not an error: wait (short back-off)
        until one is free in the pool or among the kept ones, bounded by the call's deadline
        (a timeout then, not sent)."""
        pause = 0.001
        while True:
            try:
                return await atake(self.pool)
            except PoolExhaustedError:
                await asyncio.sleep(pause)
                if self._idle:  # kept by a call that ended meanwhile (kept, not pooled)
                    return self._idle.pop()
                pause = min(pause * 2, 0.05)

    async def _read_then(self, conn: Any, context: str) -> Any:
        """The reply of the command sent behind a script, or the error it failed with."""
        try:
            return await self._read(conn)
        except ERRORS.response as error:
            return self._translate(error, context, sent=True)
        except ERRORS.failures as error:
            await adrop(conn)
            return self._translate(error, context, sent=True)

    async def _skip(self, conn: Any) -> None:
        """Read and drop one reply (an error reply too)."""
        with contextlib.suppress(*ERRORS.response):
            await self._read(conn)

    _read = staticmethod(aread)

    async def _release(self, conn: Any) -> None:
        if len(self._idle) < self._idle_cap and not self._closed and conn.is_connected:
            self._idle.append(conn)
            return
        with contextlib.suppress(Exception):  # a pool closed meanwhile
            await agive(self.pool, conn)

    # -- a fan-out's calls (syncprims._transport.aio.fanout) ----------------------------------

    def shares_open(self) -> bool:
        """Whether calls go on shared connections and every one is open now: a fan-out's
        calls may then be queued on them at once (:meth:`submit`)."""
        if not self._shared or self._closed:
            return False
        mux = self._mux
        return mux is not None and all(c.open_conn() is not None for c in mux)

    def submit(self, call: Call) -> Slot | None:
        """Queue ``call``'s command on a shared connection now, without a task or an await,
        within this server's timeout: its slot, whose future the fan-out awaits and whose
        reply :meth:`outcome` reads. ``None`` when the call must take :meth:`eval` instead
        (no shared connection open, shut down)."""
        mux = self._mux
        loop = self._loop
        if mux is None or self._closed or loop is None or get_running_loop() is not loop:
            return None
        connection = mux[0] if len(mux) == 1 else min(mux, key=_LOAD)
        if connection.open_conn() is None:
            return None
        chunks = pack(call.script_call.command())
        return connection.submit(chunks, call.on_orphan, loop.time() + self.timeout)

    def outcome(self, slot: Slot, context: str) -> Any:
        """The reply of a done slot of :meth:`submit`, or the ``SyncPrimsError`` it failed
        with (as :meth:`eval` would raise it); :data:`NOSCRIPT` when the script was not
        loaded (it did not run)."""
        if slot.future.cancelled():  # not by the fan-out (it settles first): closed
            return RedisConnectionError(
                f"{context}: the connection was closed", maybe_executed=slot.sent
            )
        error = slot.future.exception()
        if error is not None:
            if isinstance(error, BrokenError):
                return self._translate(error.cause, context, sent=error.sent)
            if isinstance(error, SlotTimeoutError):
                return self._translate(TimeoutError(), context, sent=slot.sent)
            return error
        reply = slot.future.result()
        if isinstance(reply, ERRORS.no_script):
            return NOSCRIPT
        if isinstance(reply, Exception):
            return self._translate(reply, context, sent=True)
        return reply

    def leave_late(
        self, future: asyncio.Future[Any], on_orphan: Orphan | None, skippable: bool = False
    ) -> None:
        """A fan-out's call it stopped waiting for (a slot's future, or a task of the
        per-call path), finished here within its deadline: its reply goes to ``on_orphan``;
        until then the server counts as busy (:attr:`late`; with ``skippable``, a
        ``skip_if_busy`` call, :attr:`late_skippable` too) and shutdown waits for it."""
        if future in self.late:
            return
        self.late.add(future)
        self.late_skippable += skippable

        def done(future: asyncio.Future[Any]) -> None:
            self.late.discard(future)
            self.late_skippable -= skippable
            if future.cancelled() or future.exception() is not None or on_orphan is None:
                return
            self.hand_over(future.result(), on_orphan)

        future.add_done_callback(done)

    def hand_over(self, reply: Any, on_orphan: Orphan) -> None:
        """Await ``on_orphan(reply)`` in the background (its caller went away); an error
        reply (an exception value) undoes nothing."""
        if not isinstance(reply, Exception):
            self._spawn(undo_orphan(on_orphan, reply))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a background task (awaited by :meth:`drain`)."""
        task = get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- orphans of the pooled path -----------------------------------------------------------

    async def _finish_orphan(self, conn: Any, on_orphan: Orphan, *, skip: bool = False) -> None:
        """Read the late reply of an abandoned call (within the late-reply timeout) and hand
        it to ``on_orphan``; ``skip``: a command's reply follows it on the connection
        (:meth:`eval_then`), dropped too."""
        deadlines = self._bind()
        key = deadlines.start(self._orphan_timeout)
        try:
            reply = await self._read(conn)
        except ERRORS.response:
            reply = _NOTHING  # an error reply: nothing happened
        except (Exception, asyncio.CancelledError) as error:
            gone: BaseException = TimeoutError() if deadlines.timed_out(key) else error
            await adrop(conn)
            await self._release(conn)
            log.warning("the reply of an abandoned call never came (%r); its lease bounds it", gone)
            return
        finally:
            deadlines.finish(key)
        if skip:
            await adrop(conn)  # then's reply is still on the way: do not reuse it
        await self._release(conn)
        if reply is not _NOTHING:
            await undo_orphan(on_orphan, reply)

    # -- shutdown and fork --------------------------------------------------------------------

    async def drain(self, timeout: float) -> None:
        """At shutdown: wait for the fan-out calls left here (each ends within its deadline),
        then (at most ``timeout`` seconds) for the background handling of late replies,
        cancelling what is left of it."""
        if self.late:
            await asyncio.wait(list(self.late), timeout=self.timeout + 1)
        if self._background:
            _, pending = await asyncio.wait(list(self._background), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1)

    async def release_idle(self) -> None:
        """Give the connections kept between calls back to the pool, and close the shared
        ones (after :meth:`close`)."""
        mux, self._mux = self._mux, None
        for connection in mux or ():
            await connection.aclose()
        if self._deadlines is not None:
            self._deadlines.close()
        while self._idle:
            conn = self._idle.pop()
            with contextlib.suppress(Exception):
                await agive(self.pool, conn)

    def close(self) -> None:
        """Refuse new calls (``ClientClosedError``); the pool is closed by its owner."""
        self._closed = True

    def forget(self) -> None:
        """After ``os.fork()``, in the child: never touch the parent's loop, tasks or
        connections."""
        self._loop = None
        self._deadlines = None
        self._background = set()
        self.late = set()
        self.late_skippable = 0
        self._idle = []
        self._mux = None


class AsyncRouter(ClusterRouter[AsyncServer]):
    """The asyncio face's cluster router: the router's calls, each with its ``on_orphan``
    taken to the node's server (:meth:`AsyncServer.eval`)."""

    def eval(
        self, call: ScriptCall, *, context: str, on_orphan: Orphan | None = None
    ) -> Coroutine[Any, Any, Any]:
        """Run the script ``call`` once on the node of its keys (following redirections)."""
        return self.routed(
            call.keys,
            lambda server, ask: server.eval(call, context=context, on_orphan=on_orphan, asking=ask),
        )

    async def eval_then(
        self, call: ScriptCall, then: Then, *, context: str, on_orphan: Orphan | None = None
    ) -> tuple[Any, Any]:
        """Run the script ``call`` and the command ``then`` behind it in one write, on the
        node of its keys (following redirections)."""
        result: tuple[Any, Any] = await self.routed(
            call.keys,
            lambda server, ask: server.eval_then(
                call, then, context=context, on_orphan=on_orphan, asking=ask
            ),
        )
        return result
