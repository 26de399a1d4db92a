"""Single-attempt commands over the connections of a ``redis.asyncio`` pool.

Connections come from the redis-py pool the client was built on (``await
pool.get_connection()`` / ``await pool.release()``; for a cluster node, the node's own
connection list), so the caller's settings apply; every use of a connection goes through
:mod:`syncprims._transport.connections`, which hides where redis-py versions differ. Each
call is one attempt (see :mod:`syncprims._transport.sync` for why redis-py's retrying
``execute_command`` is not used for scripts), with replies as bytes whatever
``decode_responses``.

Deadlines: ``asyncio.timeout`` arms a timer per call, which measured as 12% of an uncontended
acquire+release; instead each server keeps its in-flight calls in a dict and one sweeper
timer, running only while calls are in flight, cancels those past their deadline (at most a
quarter of the timeout late) and turns the cancellation into ``TimeoutError`` the way
``asyncio.timeout`` does (``Task.uncancel``). Reads pass ``timeout=math.inf`` so that
redis-py adds no timer of its own.

Cancellation safety: when the caller is cancelled (or times out) while a reply is in flight
and it passed ``on_orphan``, the connection is handed to a background task that reads the
late reply and awaits ``on_orphan(reply)``; a lock acquired by an abandoned call is released
that way (the hiredis parser resumes a read cut short by cancellation).

A client of the asyncio face belongs to the event loop it was created on, as redis-py's
asyncio clients do: using it from another loop raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from asyncio import get_running_loop
from collections.abc import Coroutine, Sequence
from typing import Any

from syncprims._protocol.contracts import Orphan, ScriptCall, Then
from syncprims._protocol.scripts import Script
from syncprims._transport.connections import (
    ERRORS,
    PoolExhaustedError,
    agive,
    aread,
    astale,
    atake,
    is_plain_pool,
    own_connection,
)
from syncprims._transport.errors import pack, translate
from syncprims._transport.mux import (
    BrokenError,
    Multiplexer,
    MuxConnection,
    Slot,
    SlotTimeoutError,
    undo_orphan,
)
from syncprims._transport.replicas import ReplicaCount
from syncprims.errors import ClientClosedError, SyncPrimsError

__all__ = ["AsyncServer", "NodePool", "bind_loop"]

log = logging.getLogger("syncprims.transport")

_IDLE_CAP = 8  # connections a server keeps checked out between calls
_NOTHING: Any = object()  # no reply read yet


class _NoScript:
    """The type of :data:`NOSCRIPT`."""

    def __repr__(self) -> str:
        return "NOSCRIPT"


NOSCRIPT = _NoScript()
"""A fast-path script call found its script not loaded (it did not run)."""


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


class _Deadlines:
    """Per-call deadlines with one sweeper timer per event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop = loop
        self._timeout = timeout
        self._period = min(timeout / 4, 0.25)
        self._calls: dict[int, tuple[float, asyncio.Task[Any], int]] = {}
        self._expired: set[int] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._next = 0

    def start(self, timeout: float | None = None) -> int:
        """Register the current task's call; returns its key."""
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
        """Unregister a call."""
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

    def _sweep(self) -> None:
        self._timer = None
        now = self._loop.time()
        for key, (deadline, task, _) in list(self._calls.items()):
            if deadline <= now and key not in self._expired:
                self._expired.add(key)
                task.cancel()
        if self._calls:
            self._timer = self._loop.call_later(self._period, self._sweep)


class NodePool:
    """The connections of one ``redis.asyncio`` cluster node, with a pool's interface."""

    def __init__(self, node: Any) -> None:
        self._node = node
        self.connection_kwargs: dict[str, Any] = node.connection_kwargs

    async def get_connection(self) -> Any:
        """A connected connection of the node (redis-py's ``acquire_connection``)."""
        conn = self._node.acquire_connection()
        try:
            if conn.is_connected and await astale(conn):
                await conn.disconnect()  # closed by the server, or holds unread data
            if not conn.is_connected:
                await conn.connect()
        except BaseException:
            self._node.release(conn)
            raise
        return conn

    async def release(self, conn: Any) -> None:
        """Give a connection back to the node."""
        self._node.release(conn)

    @property
    def connection_class(self) -> Any:
        """The node's connection class (for :func:`~syncprims._transport.connections.
        own_connection`)."""
        return self._node.connection_class


class AsyncServer:
    """Calls on one server (or sentinel-managed master, or cluster node) through a
    ``redis.asyncio`` pool.

    Args:
        pool: the pool (``redis.asyncio.ConnectionPool`` of any kind, or a :class:`NodePool`).
        address: where the server is, for messages.
        timeout: the longest a call may take, seconds (connection, write and reply).
        orphan_timeout: the longest to wait for the late reply of an abandoned call, seconds.
        loop: the client's event loop.
        shared: connections of its own that carry every call without a timeout of its own
            (:mod:`syncprims._transport.mux`); 0: every call takes a pooled connection.
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
        self._mux: Multiplexer | None = None
        self.address = address
        self.timeout = timeout
        self._orphan_timeout = max(timeout, orphan_timeout)
        self._loop = loop
        self._deadlines: _Deadlines | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        # Connections kept checked out between calls, as the sync transport does and for the
        # same reason (the pool's bookkeeping per call; docs/design.md, "Profile: the pool"):
        # only over a plain redis.asyncio ConnectionPool.
        self._idle: list[Any] = []
        self._idle_cap = _IDLE_CAP if is_plain_pool(pool) else 0
        self.replicas = ReplicaCount()  # its master's, for lock_synced_replicas="auto"

    def _translate(self, error: BaseException, context: str, *, sent: bool) -> SyncPrimsError:
        """``translate`` with this server's address and reply timeout."""
        return translate(
            error, context=context, address=self.address, timeout=self.timeout, sent=sent
        )

    def _bind(self) -> _Deadlines:
        loop = bind_loop(self._loop)
        deadlines = self._deadlines
        if deadlines is None or self._loop is None:
            self._loop = loop
            deadlines = self._deadlines = _Deadlines(loop, self.timeout)
        return deadlines

    def eval(
        self,
        call: ScriptCall,
        *,
        context: str,
        on_orphan: Orphan | None = None,
        asking: bool = False,
    ) -> Coroutine[Any, Any, Any]:
        """Run the script ``call`` once (EVALSHA; SCRIPT LOAD and again on NOSCRIPT): a
        coroutine.

        ``asking`` sends ``ASKING`` first (a cluster ASK redirection). On an open shared
        connection of this loop, the call takes :meth:`_timed_eval` (no coroutine layers,
        task bookkeeping or deadline registration of its own: docs/design.md, "Profile:
        thousands of tasks"); otherwise :meth:`_call`. Same outcomes either way.

        Raises (when awaited):
            RedisConnectionError, RedisTimeoutError: with ``maybe_executed`` set when the
                script may have run.
            ServerReplyError: Redis answered with an error.
        """
        command = call.command()
        mux = self._mux
        if mux is not None and not asking and not self._closed:
            connection = mux.pick()
            conn = connection.open_conn()
            if conn is not None and get_running_loop() is self._loop:
                return self._timed_eval(connection, pack(conn, command), call, context, on_orphan)
        return self._call(command, context, on_orphan=on_orphan, script=call.script, asking=asking)

    async def _timed_eval(
        self,
        connection: MuxConnection,
        chunks: list[Any],
        call: ScriptCall,
        context: str,
        on_orphan: Orphan | None,
    ) -> Any:
        """:meth:`eval` on an open shared connection, its deadline kept by the connection
        (:meth:`MuxConnection.submit_timed`). A ``NOSCRIPT`` (it did not run) goes the
        per-call way, which loads the script and runs it again."""
        slot = connection.submit_timed(chunks, on_orphan, self.timeout)
        try:
            reply = await slot.future
        except BrokenError as broken:
            raise self._translate(broken.cause, context, sent=broken.sent) from broken.cause
        except SlotTimeoutError:
            raise self._translate(TimeoutError(), context, sent=slot.sent) from None
        except asyncio.CancelledError:
            connection.abandon(slot, timed_out=False)
            raise
        if isinstance(reply, Exception):
            if isinstance(reply, ERRORS.no_script):
                return await self._call(
                    call.command(), context, on_orphan=on_orphan, script=call.script
                )
            raise self._translate(reply, context, sent=True) from reply
        return reply

    async def command(
        self,
        *args: str | int,
        context: str,
        route: str | None = None,
        asking: bool = False,
        timeout: float | None = None,
        hold: bool = False,
    ) -> Any:
        """Run one plain command once (``route``: its key, for a cluster; ``timeout``: seconds
        for the whole call instead of the usual, for blocking commands; ``hold``: accepted
        for symmetry with the blocking transport, whose direct grant pops on a connection
        of its own: the asyncio face issues no such command). Raises as :meth:`eval`."""
        return await self._call(args, context, asking=asking, timeout=timeout)

    async def eval_then(
        self,
        call: ScriptCall,
        then: Then,
        *,
        context: str,
        on_orphan: Orphan | None = None,
        asking: bool = False,
    ) -> tuple[Any, Any]:
        """Run the script ``call`` once (as :meth:`eval`) and the plain command ``then``
        right behind it, in one write on one connection: one round trip for both (an
        acquire and its ``WAIT``); the call may take ``then.timeout`` longer than the usual
        timeout.

        Returns:
            The script's reply, and ``then``'s reply or the ``SyncPrimsError`` it failed with
            (the script's outcome is never lost to a failure of ``then``; a caller cancelled
            while ``then``'s reply is in flight hands the script's reply to ``on_orphan``).

        Raises:
            As :meth:`eval`, for the script.
        """
        reply, after = await self._call(
            call.command(),
            context,
            on_orphan=on_orphan,
            script=call.script,
            asking=asking,
            timeout=self.timeout + then.timeout,
            then=tuple(then.command),
        )
        return reply, after

    async def _call(
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
        """One call; with ``then`` (:meth:`eval_then`), ``(reply, then's reply or error)``."""
        if self._closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        if self._shared and then is None and timeout is None:
            return await self._shared_call(command, context, on_orphan, script, asking)
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
                prefix = pack(conn, ("ASKING",)) if asking else []
                behind = pack(conn, then) if then is not None else []
                await conn.send_packed_command(
                    prefix + pack(conn, command) + behind, check_health=False
                )
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
                    await conn.send_packed_command(pack(conn, command) + behind, check_health=False)
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
                    await _drop(conn)
                    late = self._translate(TimeoutError(), context, sent=True)
                    return first, late
                if conn is not None and sent and on_orphan is not None:
                    keep = False
                    if first is _NOTHING:
                        self._adopt(conn, on_orphan, skip=then is not None)
                    else:  # only then's reply is missing: hand the script's over
                        await _drop(conn)
                        await self._release(conn)
                        self._hand_over(first, on_orphan)
                if timed_out:
                    raise TimeoutError from None
                raise
        except ERRORS.response as error:
            raise self._translate(error, context, sent=sent) from error
        except ERRORS.failures as error:
            if keep and conn is not None:
                await _drop(conn)
            raise self._translate(error, context, sent=sent) from error
        except BaseException:
            if keep and conn is not None:
                await _drop(conn)
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

    def _multiplexer(self) -> Multiplexer:
        mux = self._mux
        if mux is None:
            loop = bind_loop(self._loop)
            pool = self.pool
            mux = self._mux = Multiplexer(
                lambda: own_connection(pool),
                self._shared,
                loop,
                self._background,
                self._orphan_timeout,
            )
        return mux

    async def _shared_call(
        self,
        command: tuple[Any, ...],
        context: str,
        on_orphan: Orphan | None,
        script: Script | None,
        asking: bool,
    ) -> Any:
        """One call on a shared connection (:mod:`syncprims._transport.mux`): the same
        outcomes as the per-call path of :meth:`_call`."""
        deadlines = self._bind()
        key = deadlines.start()
        connection = self._multiplexer().pick()
        slot: Slot | None = None  # the slot awaited now
        command_slot: Slot | None = None  # the command's (not a SCRIPT LOAD's)
        sent = False
        try:
            try:
                conn = await connection.ready()
                chunks = (pack(conn, ("ASKING",)) if asking else []) + pack(conn, command)
                count = 2 if asking else 1
                slot = command_slot = connection.submit(chunks, count, on_orphan)
                replies = await slot.future
                sent = True
                reply = replies[-1]
                if asking and isinstance(replies[0], Exception):
                    raise replies[0]
                if isinstance(reply, ERRORS.no_script) and script is not None:
                    sent = False  # NOSCRIPT: it did not run
                    command_slot = None
                    slot = connection.submit(pack(conn, ("SCRIPT", "LOAD", script.source)), 1)
                    loaded = (await slot.future)[0]
                    if isinstance(loaded, Exception):
                        raise loaded
                    slot = command_slot = connection.submit(chunks, count, on_orphan)
                    replies = await slot.future
                    sent = True
                    reply = replies[-1]
                if isinstance(reply, Exception):
                    raise reply
                return reply
            except BrokenError as broken:
                raise self._translate(
                    broken.cause, context, sent=broken.sent and slot is command_slot
                ) from broken.cause
            except asyncio.CancelledError:
                timed_out = deadlines.timed_out(key)
                if slot is not None:  # a slot never written is never written later
                    connection.abandon(slot, timed_out=timed_out)
                    sent = slot is command_slot and slot.sent
                if timed_out:
                    raise TimeoutError from None
                raise
        except ERRORS.response as error:
            raise self._translate(error, context, sent=sent) from error
        except ERRORS.failures as error:
            raise self._translate(error, context, sent=sent) from error
        finally:
            deadlines.finish(key)

    def shares_open(self) -> bool:
        """Whether calls go on shared connections and one is open (:meth:`submit_script`)."""
        if not self._shared or self._closed:
            return False
        mux = self._mux
        return mux is not None and all(c.open_conn() is not None for c in mux.connections)

    def submit_script(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        on_orphan: Orphan | None,
    ) -> tuple[MuxConnection, Slot] | None:
        """Queue one EVALSHA on a shared connection now, without a task or an await (a
        fan-out's fast path, :meth:`AsyncExecutor.eval_many`): the connection and its slot,
        whose future the caller awaits and whose outcome :meth:`slot_outcome` gives.
        ``None`` when the call must take :meth:`eval` instead: no shared connections, none
        open yet, shut down."""
        if not self._shared or self._closed:
            return None
        bind_loop(self._loop)
        connection = self._multiplexer().pick()
        conn = connection.open_conn()
        if conn is None:
            return None
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        return connection, connection.submit(pack(conn, command), 1, on_orphan, now=True)

    def slot_outcome(self, slot: Slot, context: str) -> Any:
        """The reply of a done slot of :meth:`submit_script`, or the ``SyncPrimsError`` it
        failed with (as :meth:`eval` would raise it); :data:`NOSCRIPT` when the script
        was not loaded (it did not run: :meth:`eval` loads it)."""
        error = slot.future.exception()
        if error is not None:
            if isinstance(error, BrokenError):
                return self._translate(error.cause, context, sent=error.sent)
            return error
        reply = slot.future.result()[-1]
        if isinstance(reply, ERRORS.no_script):
            return NOSCRIPT
        if isinstance(reply, Exception):
            return self._translate(reply, context, sent=True)
        return reply

    def timed_out(self, connection: MuxConnection, slot: Slot, context: str) -> SyncPrimsError:
        """Give up on a slot of :meth:`submit_script` whose reply did not come in
        :attr:`timeout` (its late reply goes to its ``on_orphan``; its connection is
        retired as silent): the error :meth:`eval` raises then."""
        slot.future.cancel()
        connection.abandon(slot, timed_out=True)
        return self._translate(TimeoutError(), context, sent=slot.sent)

    async def _read_then(self, conn: Any, context: str) -> Any:
        """The reply of the command sent behind a script, or the error it failed with."""
        try:
            return await self._read(conn)
        except ERRORS.response as error:
            return self._translate(error, context, sent=True)
        except ERRORS.failures as error:
            await _drop(conn)
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

    async def release_idle(self) -> None:
        """Give the connections kept between calls back to the pool, and close the shared
        ones (after :meth:`close`)."""
        mux, self._mux = self._mux, None
        if mux is not None:
            await mux.aclose()
        while self._idle:
            conn = self._idle.pop()
            with contextlib.suppress(Exception):
                await agive(self.pool, conn)

    def _adopt(self, conn: Any, on_orphan: Orphan, *, skip: bool = False) -> None:
        task = asyncio.get_running_loop().create_task(
            self._finish_orphan(conn, on_orphan, skip=skip)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _hand_over(self, reply: Any, on_orphan: Orphan) -> None:
        """Await ``on_orphan(reply)`` in the background (its caller went away)."""
        task = asyncio.get_running_loop().create_task(undo_orphan(on_orphan, reply))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _finish_orphan(self, conn: Any, on_orphan: Orphan, *, skip: bool = False) -> None:
        """Read the late reply of an abandoned call and hand it to ``on_orphan``; ``skip``:
        a command's reply follows it on the connection (:meth:`eval_then`), dropped too."""
        try:
            async with asyncio.timeout(self._orphan_timeout):
                reply = await self._read(conn)
        except ERRORS.response:
            if skip:
                await _drop(conn)  # then's reply is still on the way: do not reuse it
            await self._release(conn)  # an error reply: nothing happened
            return
        except (Exception, asyncio.CancelledError) as error:
            await _drop(conn)
            await self._release(conn)
            log.warning(
                "the reply of an abandoned call never came (%r); its lease bounds it", error
            )
            return
        if skip:
            await _drop(conn)  # then's reply is still on the way: do not reuse it
        await self._release(conn)
        try:
            await on_orphan(reply)
        except Exception:
            log.exception("releasing what an abandoned call acquired failed; its lease bounds it")

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for background orphan handling, then cancel it."""
        if self._background:
            _, pending = await asyncio.wait(list(self._background), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1)

    def close(self) -> None:
        """Refuse new calls (``ClientClosedError``); the pool is closed by its owner."""
        self._closed = True

    def forget(self) -> None:
        """After ``os.fork()``, in the child: never touch the parent's loop, tasks or
        connections."""
        self._loop = None
        self._deadlines = None
        self._background = set()
        self._idle = []
        self._mux = None


async def _drop(conn: Any) -> None:
    with contextlib.suppress(Exception):  # already broken
        await conn.disconnect(nowait=True)
