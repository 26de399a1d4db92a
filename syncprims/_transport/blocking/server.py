"""Single-attempt commands over the connections of a blocking redis-py pool (the one the
client was built on, so its settings, fork check and stale-connection check apply).

Why a command is written once and its reply read once (not through redis-py's retrying
``execute_command``), ``SCRIPT LOAD`` on ``NOSCRIPT``, replies as bytes with a per-read
deadline, and the connections kept between calls within a share of the pool:
``docs/design.md``, "One attempt per command". Every use of a connection's internals goes
through :mod:`syncprims._transport.compat`.

The methods are ``async def`` so that the shared core can await them, but they never
suspend: they block the calling thread and return, which lets the sync face run the core
coroutine to completion in one step. The fan-out over several servers is
:mod:`syncprims._transport.blocking.fanout`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
import time
from typing import Any, Protocol

from syncprims._protocol.contracts import ScriptCall, Then
from syncprims._protocol.scripts import Script
from syncprims._protocol.wire import pack
from syncprims._transport.cluster import ClusterRouter
from syncprims._transport.compat import (
    ERRORS,
    PoolExhaustedError,
    give,
    is_plain_pool,
    own_connection,
    read,
    still_owned,
    take,
)
from syncprims._transport.errors import translate
from syncprims._transport.replicas import ReplicaCount
from syncprims.errors import (
    ClientClosedError,
    RedisConnectionError,
    SyncPrimsError,
)

__all__ = [
    "Lane",
    "SyncRouter",
    "SyncServer",
    "buffered",
    "pool_share",
    "stale",
    "stale_among",
]

log = logging.getLogger("syncprims.transport")

_IDLE_CAP = 8  # connections a server keeps checked out between calls (see checkout())


class _Process:
    """This process's id, kept here for the kept connections' fork check on every call
    (``os.getpid()`` is a system call: [hot-6]). Updated in a forked child."""

    pid = os.getpid()

    @classmethod
    def forked(cls) -> None:
        cls.pid = os.getpid()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_Process.forked)


def pool_share(pool: object, most: int) -> int:
    """How many of ``pool``'s connections syncprims may hold at once (``Config.pool_share``):
    ``most``, and never more than a quarter of the pool's ``max_connections``, at least one,
    so that the application's own commands always find most of its pool free."""
    size = getattr(pool, "max_connections", None)
    if isinstance(size, int) and size > 0:
        return max(1, min(most, size // 4))
    return max(1, most)


def stale(conn: Any) -> bool:
    """Whether a kept connection has unread data (a reply nobody read) or was closed by the
    server (a restart): an idle connection is readable only then. One ``select`` call, not
    redis-py's ``can_read()`` (three system calls: [hot-6])."""
    sock = conn._sock
    if sock is None:
        return True
    try:
        if buffered(conn):
            return True
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def stale_among(kept: dict[int, Any]) -> list[int]:
    """The keys of ``kept`` whose connection is stale (as :func:`stale`), in one ``select``
    ([hot-6]); ``None`` values are passed over."""
    socks: dict[Any, int] = {}
    found: list[int] = []
    for i, conn in kept.items():
        if conn is None:
            continue
        if conn._sock is None or buffered(conn):
            found.append(i)
        else:
            socks[conn._sock] = i
    if socks:
        try:
            readable, _, _ = select.select(list(socks), [], [], 0)
        except (OSError, ValueError):  # one of them closed: check each alone
            return [i for i, conn in kept.items() if conn is not None and stale(conn)]
        found.extend(socks[sock] for sock in readable)
    return found


def buffered(conn: Any) -> bool:
    """Whether a TLS socket holds decrypted bytes ``select`` cannot see (a plain socket is
    told apart by its type first: a fan-out asks this of every connection it waits on)."""
    sock = conn._sock
    if type(sock) is socket.socket:
        return False
    pending = getattr(sock, "pending", None)
    return bool(pending()) if pending is not None else False


class Lane(Protocol):
    """A server's late lane, as the server sees it (``blocking.fanout.LateLane``: it
    finishes the calls a fan-out stopped waiting for)."""

    def busy(self) -> bool:
        """Whether calls are still being finished (the server may be sick)."""


class SyncServer:
    """Calls on one server (or sentinel-managed master) through a blocking redis-py pool.

    Args:
        pool: the redis-py pool (any kind: ``ConnectionPool``, ``BlockingConnectionPool``,
            ``SentinelConnectionPool``, fakeredis').
        address: where the server is, for messages.
        timeout: the longest wait for one reply, seconds.
        share: the most of the pool's connections it holds at once (``Config.pool_share``).
    """

    def __init__(self, pool: Any, *, address: str, timeout: float, share: int) -> None:
        self.pool = pool
        self.address = address
        self.timeout = timeout
        own = pool.connection_kwargs.get("socket_timeout")
        # a per-read timeout only where the connection's own would wait longer (or forever)
        self._read_timeout: float | None = None if own is not None and own <= timeout else timeout
        self.healthy = True  # False after a call failed to reach the server
        self._closed = False
        # Connections kept checked out between calls (see checkout()): only over a plain
        # ConnectionPool, whose size is not a limit the application waits on.
        self._idle: list[Any] = []
        self.share = pool_share(pool, share)
        self._idle_cap = min(_IDLE_CAP, self.share) if is_plain_pool(pool) else 0
        # The pool's connections syncprims holds (in a call or kept): at most ``share``.
        self._pooled = 0
        self._freed = threading.Condition(threading.Lock())
        self._waiting = 0  # threads waiting in checkout() for the share
        # Connections of syncprims' own for calls that hold one while Redis blocks them (a
        # direct grant's BLPOP): never the pool's (docs/configuration.md, ``pool_share``).
        self._held: list[Any] = []
        self._pid = _Process.pid
        # Made by the fan-out when it first leaves a call here (blocking.fanout.LateLane).
        self.lane: Lane | None = None
        self.replicas = ReplicaCount()  # its master's, for lock_synced_replicas="auto"

    # -- connections --------------------------------------------------------------------------

    def checkout(self, context: str) -> Any:
        """A connected connection: one this server kept from an earlier call (up to
        ``_IDLE_CAP``, over a plain ``ConnectionPool`` only: [hot-7]), else the pool's.

        At most :attr:`share` of the pool's connections are held at once (:func:`pool_share`),
        and a full pool is load, not an error: both waits together last at most the reply
        timeout (``docs/design.md``, "One attempt per command"). In a forked child the
        parent's kept connections are never used.

        Raises:
            ClientClosedError: after :meth:`close`.
            TransportError: no connection came within the reply timeout, or the pool could
                not connect one (``maybe_executed`` false).
        """
        if self._closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        conn = self.take_kept()
        if conn is not None:
            if not stale(conn):
                return conn
            self.forget(conn)
        deadline = time.monotonic() + self.timeout  # a BlockingConnectionPool's own wait counts
        pause = 0.001
        while True:
            if self._claim(deadline):
                try:
                    conn = take(self.pool)
                except PoolExhaustedError as error:
                    self._unclaim()
                    last: BaseException = error
                except BaseException as error:
                    self._unclaim()
                    self._lost(error, context, sent=False)
                    raise
                else:
                    return conn
            else:
                last = PoolExhaustedError(f"syncprims holds its share, {self.share}")
            kept = self.take_kept()  # given back meanwhile (kept, not to the pool)
            if kept is not None:
                if not stale(kept):
                    return kept
                self.forget(kept)
                continue
            if self._closed:
                raise ClientClosedError(f"the client is shut down ({context})")
            now = time.monotonic()
            if now >= deadline:
                raise RedisConnectionError(
                    f"the connection pool of Redis at {self.address} had no free "
                    f"connection for {self.timeout:g} s while {context} ({last})",
                    maybe_executed=False,
                ) from last
            if isinstance(last, PoolExhaustedError) and self._pooled < self.share:
                time.sleep(min(pause, deadline - now))  # the pool is full: poll it
                pause = min(pause * 2, 0.05)

    def _claim(self, deadline: float) -> bool:
        """Count one more pooled connection if the share allows, else wait until a pooled
        or kept connection comes back (or ``deadline``). ``True``: counted."""
        with self._freed:
            if self._pid != _Process.pid:  # a forked child: the parent's are not ours
                self._pid = _Process.pid
                self._pooled = 0
                self._idle.clear()
                self._held.clear()  # dropped, not closed: their sockets are the parent's
            if self._pooled < self.share:
                self._pooled += 1
                return True
            if self._idle:
                return False  # kept one came back: the caller takes it
            self._waiting += 1
            try:
                self._freed.wait(max(0.0, min(deadline - time.monotonic(), 0.05)))
            finally:
                self._waiting -= 1
            if self._pooled < self.share:
                self._pooled += 1
                return True
            return False

    def _unclaim(self) -> None:
        with self._freed:
            self._pooled = max(0, self._pooled - 1)
            self._freed.notify()

    def busy(self) -> bool:
        """Whether a fan-out's late lane still finishes calls here (the server may be sick)."""
        lane = self.lane
        return lane is not None and lane.busy()

    def take_kept(self) -> Any:
        """A connection kept from an earlier call, not checked yet (:func:`stale`), or
        ``None``. In a forked child the parent's are dropped, not used."""
        while self._idle:
            try:
                conn = self._idle.pop()
            except IndexError:  # another thread took the last one
                return None
            if self._pid == _Process.pid:
                return conn
        return None

    def checkin(self, conn: Any) -> None:
        """Give a connection back (kept for the next call when there is room)."""
        if len(self._idle) < self._idle_cap and not self._closed and conn._sock is not None:
            self._idle.append(conn)
            if self._waiting:
                with self._freed:
                    self._freed.notify()
        else:
            self._give(conn)

    def discard(self, conn: Any) -> None:
        """Give back a connection whose state is unknown (closed first)."""
        conn.disconnect()
        self._give(conn)

    def _give(self, conn: Any) -> None:
        give(self.pool, conn)
        self._unclaim()

    def forget(self, conn: Any) -> None:
        """Drop a kept connection found stale (closed and given back; in a forked child, the
        parent's is left alone)."""
        if self._pid != _Process.pid:
            return  # the parent's connection: the pool of this child resets itself
        self.discard(conn)

    def _take_held(self, context: str) -> Any:
        """A connected connection of syncprims' own for a blocking call (:attr:`_held`, else
        a new one). Connected here, by its own ``connect()``: redis-py 8's
        ``send_packed_command`` connects through ``connect_check_health``, which a Sentinel
        connection does not override, so it would go to the default host, not the master.

        Raises:
            TransportError: it could not connect (``maybe_executed`` false).
        """
        conn = None
        while self._held:
            try:
                conn = self._held.pop()
            except IndexError:
                break
            if self._pid != _Process.pid:
                conn = None
                continue
            if stale(conn) or not still_owned(self.pool, conn):
                conn.disconnect()  # connected again below (to the current master)
            break
        if conn is None:
            conn = own_connection(self.pool)
        if conn._sock is None:
            try:
                conn.connect()
            except ERRORS.failures as error:
                conn.disconnect()
                self._give_held(conn)
                raise self._translate(error, context, sent=False) from error
        return conn

    def _give_held(self, conn: Any) -> None:
        if self._closed or self._pid != _Process.pid:
            conn.disconnect()
        else:
            self._held.append(conn)

    # -- calls --------------------------------------------------------------------------------

    async def eval(self, call: ScriptCall, *, context: str, asking: bool = False) -> Any:
        """:meth:`~syncprims._transport.server.NodeServer.eval`. A blocking caller cannot go
        away while its reply is out (an interrupt, e.g. ``KeyboardInterrupt``, drops the
        connection; the lease bounds what it leaves): no reply outlives its call."""
        return self._call(call.command(), context, call.script, asking)

    async def command(
        self,
        *args: str | int,
        context: str,
        route: str | None = None,
        timeout: float | None = None,
        asking: bool = False,
    ) -> Any:
        """Run one plain command once (``route``: the key whose node runs it: every key is on
        this server; ``timeout``: seconds for its reply instead of the client's). Raises as
        :meth:`eval`."""
        return self._call(args, context, None, asking, timeout)

    async def command_held(
        self,
        *args: str | int,
        context: str,
        timeout: float,
        route: str | None = None,
        asking: bool = False,
    ) -> Any:
        """:meth:`command`, for a command Redis blocks (the direct grant's ``BLPOP``), on a
        connection of syncprims' own held meanwhile, never the pool's
        (docs/configuration.md, ``pool_share``). Raises as :meth:`eval`."""
        return self._call(args, context, None, asking, timeout, hold=True)

    async def eval_then(
        self, call: ScriptCall, then: Then, *, context: str, asking: bool = False
    ) -> tuple[Any, Any]:
        """:meth:`~syncprims._transport.server.NodeServer.eval_then`; ``then``'s reply is
        awaited ``then.timeout`` longer than the usual timeout (and read and dropped first
        when the script fails)."""
        script, command = call.script, call.command()
        after_command = tuple(then.command)
        then_wait = self.timeout + then.timeout
        conn = self.checkout(context)
        try:
            if asking:
                self.send(conn, ("ASKING",), context, command, after_command)
                self.receive(conn, ("ASKING",), context, None)
            else:
                self.send(conn, command, context, after_command)
            try:
                reply = self.receive(
                    conn,
                    command,
                    context,
                    script,
                    asking,
                    then=after_command,
                    then_timeout=then_wait,
                )
            except SyncPrimsError:
                if conn._sock is not None:  # an error reply: then's reply still comes
                    self._skip(conn, then_wait)
                raise
            after: Any
            try:
                after = self.receive(conn, after_command, context, None, timeout=then_wait)
            except SyncPrimsError as error:
                after = error
        except BaseException:
            self.checkin(conn)  # send/receive disconnected it if its state is unknown
            raise
        self.checkin(conn)
        return reply, after

    def _call(
        self,
        command: tuple[Any, ...],
        context: str,
        script: Script | None,
        asking: bool = False,
        timeout: float | None = None,
        *,
        hold: bool = False,
    ) -> Any:
        if hold and self._closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        conn = self._take_held(context) if hold else self.checkout(context)
        back = self._give_held if hold else self.checkin
        try:
            if asking:
                self.send(conn, ("ASKING",), context)
            self.send(conn, command, context)
            if asking:
                self.receive(conn, ("ASKING",), context, None)
            reply = self.receive(conn, command, context, script, asking, timeout=timeout)
        except BaseException:
            if hold:  # an error reply too (READONLY: a demoted master): connect afresh
                conn.disconnect()
            back(conn)  # send/receive disconnected it if its state is unknown
            raise
        back(conn)
        return reply

    def send(
        self, conn: Any, command: tuple[Any, ...], context: str, *more: tuple[Any, ...]
    ) -> None:
        """Write a command (and ``more`` behind it, in the same write); a failure here means
        none of them ran."""
        try:
            packed = pack(command)
            for other in more:
                packed = packed + pack(other)
            conn.send_packed_command(packed, check_health=False)
        except BaseException as error:
            conn.disconnect()
            self._lost(error, context, sent=False)
            raise

    def receive(
        self,
        conn: Any,
        command: tuple[Any, ...],
        context: str,
        script: Script | None,
        asking: bool = False,
        *,
        timeout: float | None = None,
        then: tuple[Any, ...] | None = None,
        then_timeout: float | None = None,
    ) -> Any:
        """Read the reply of a command sent by :meth:`send` (SCRIPT LOAD and again on
        NOSCRIPT); ``timeout``: seconds to wait for it instead of the usual. ``then``: the
        command sent right behind it (:meth:`eval_then`), sent again behind it on NOSCRIPT,
        its first reply dropped; its own reply is left for the caller."""
        sent = True
        wait = timeout if timeout is not None else self._read_timeout
        try:
            try:
                reply = self._read(conn, wait)
            except ERRORS.no_script:
                if script is None:
                    raise
                sent = False  # NOSCRIPT: it did not run
                if then is not None:  # then ran after the NOSCRIPT: drop its reply
                    with contextlib.suppress(*ERRORS.response):
                        self._read(conn, then_timeout)
                conn.send_command("SCRIPT", "LOAD", script.source, check_health=False)
                self._read(conn, wait)
                if asking:
                    conn.send_command("ASKING", check_health=False)
                    self._read(conn, wait)
                packed = pack(command)
                if then is not None:
                    packed = packed + pack(then)
                conn.send_packed_command(packed, check_health=False)
                sent = True
                reply = self._read(conn, wait)
        except ERRORS.response as error:
            raise self._translate(error, context, sent=sent) from error
        except BaseException as error:
            conn.disconnect()
            self._lost(error, context, sent=sent)
            raise
        self.healthy = True
        return reply

    def _skip(self, conn: Any, timeout: float | None) -> None:
        """Read and drop one reply (an error reply too); close the connection if it fails."""
        try:
            self._read(conn, timeout)
        except ERRORS.response:
            pass
        except BaseException as error:
            conn.disconnect()
            if not isinstance(error, ERRORS.failures):
                raise
            self.healthy = False

    _read = staticmethod(read)

    def _translate(self, error: BaseException, context: str, *, sent: bool) -> SyncPrimsError:
        return translate(
            error, context=context, address=self.address, timeout=self.timeout, sent=sent
        )

    def _lost(self, error: BaseException, context: str, *, sent: bool) -> None:
        """Raise ``error``'s translation if it is a failure to reach the server (then marked
        unhealthy); any other error is left for the caller to re-raise as it is."""
        if isinstance(error, ERRORS.failures):
            self.healthy = False
            raise self._translate(error, context, sent=sent) from error

    def close(self) -> None:
        """Refuse new calls (``ClientClosedError``) and give the kept connections back to the
        pool; the pool is closed by its owner."""
        self._closed = True
        conn = self.take_kept()
        while conn is not None:
            self._give(conn)
            conn = self.take_kept()
        while self._held:
            try:
                conn = self._held.pop()
            except IndexError:
                break
            if self._pid == _Process.pid:
                conn.disconnect()
        with self._freed:
            self._freed.notify_all()  # waiters see the client closed


class SyncRouter(ClusterRouter[SyncServer]):
    """The blocking face's cluster router: the router's calls, and :meth:`command_held` on
    the node of its key."""

    async def command_held(
        self, *args: str | int, context: str, timeout: float, route: str | None = None
    ) -> Any:
        """:meth:`SyncServer.command_held` on the node of ``route`` (following
        redirections)."""
        return await self.routed(
            [route] if route is not None else [],
            lambda server, ask: server.command_held(
                *args, context=context, timeout=timeout, asking=ask
            ),
        )
