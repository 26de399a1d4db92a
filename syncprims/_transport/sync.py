"""Single-attempt commands over the connections of a blocking redis-py pool.

Connections come from the redis-py ``ConnectionPool`` the client was built on (the caller's,
or one made from a URL): ``get_connection()`` / ``release()``, so the pool's settings (TLS,
credentials, database, client name, socket timeouts, its size and blocking behaviour) apply,
and its fork check and stale-connection check run. What syncprims does itself, and why:

* **One attempt per command.** redis-py's ``Redis.execute_command`` (and so ``evalsha``,
  ``Script``, ``RedisCluster``) re-sends a command after a connection error or a timeout
  (its default ``Retry``). An acquire script whose reply was lost would then run twice and
  count the hold twice (Redisson bug #7367; ``tests/test_redis_py_fit.py`` reproduces it
  through a proxy that drops one reply). So the transport writes the command on a pooled
  connection and reads its reply once (``send_packed_command`` / ``read_response``, through
  :mod:`syncprims._transport.connections`, which hides where redis-py versions differ), and
  the core decides from :attr:`~syncprims.errors.TransportError.maybe_executed` what may be
  retried.
* **EVALSHA, then SCRIPT LOAD and EVALSHA again on NOSCRIPT** on the same connection: a
  NOSCRIPT reply means the script did not run, so that second send is safe (redis-py's
  ``Script`` does the same, but through the retrying path).
* **Replies as bytes**, whatever the client's ``decode_responses`` (``read_response(
  disable_decoding=True)``), and a per-read deadline when the client's own socket timeout
  is longer than syncprims' ``timeout`` or unset.

The methods are ``async def`` so that the shared core can await them, but they never
suspend: they block the calling thread and return, which lets the sync face run the core
coroutine to completion in one step.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from syncprims._protocol.contracts import PENDING, Enough, Orphan
from syncprims._protocol.scripts import Script
from syncprims._protocol.timing import MIN_GRACE
from syncprims._transport.connections import (
    ERRORS,
    PoolExhaustedError,
    give,
    is_plain_pool,
    own_connection,
    pool_share,
    read,
    still_owned,
    take,
)
from syncprims._transport.errors import pack, translate
from syncprims._transport.replicas import ReplicaCount
from syncprims.errors import (
    ClientClosedError,
    RedisConnectionError,
    RedisTimeoutError,
    SyncPrimsError,
)

__all__ = ["Handoff", "LateLane", "Routed", "SyncServer", "fan_out"]

log = logging.getLogger("syncprims.transport")

_IDLE_CAP = 8  # connections a server keeps checked out between calls (see checkout())
POOL_SHARE = 8  # the most pooled connections a server holds at once (Config.pool_share)


class _Process:
    """This process's id, kept here: ``os.getpid()`` is a system call, and the kept
    connections were checked against it on every call (2 of an uncontended pair's syscalls,
    10 of a RedLock x5 pair's; docs/design.md). Updated in a forked child."""

    pid = os.getpid()

    @classmethod
    def forked(cls) -> None:
        cls.pid = os.getpid()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_Process.forked)


class SyncServer:
    """Calls on one server (or sentinel-managed master) through a blocking redis-py pool.

    Args:
        pool: the redis-py pool (any kind: ``ConnectionPool``, ``BlockingConnectionPool``,
            ``SentinelConnectionPool``, fakeredis').
        address: where the server is, for messages.
        timeout: the longest wait for one reply, seconds.
    """

    def __init__(self, pool: Any, *, address: str, timeout: float, share: int = POOL_SHARE) -> None:
        self.pool = pool
        self.address = address
        self.timeout = timeout
        own = pool.connection_kwargs.get("socket_timeout")
        # A per-read timeout costs two settimeout() calls per read: pass one only when the
        # connection's own would wait longer (or forever).
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
        self.lane = LateLane(self)  # its thread starts when a fan-out first stops early
        self.replicas = ReplicaCount()  # its master's, for lock_synced_replicas="auto"

    # -- connections --------------------------------------------------------------------------

    def checkout(self, context: str) -> Any:
        """A connected connection: one this server kept from an earlier call, else the pool's.

        Why a few connections stay checked out: redis-py 8's ``get_connection()`` and
        ``release()`` cost about 6 us per command together (lock, bookkeeping, the
        observability recorder), which made an uncontended lock/unlock pair 25-30 % slower
        than over the previous own pool (docs/design.md, "Profile: the pool"). So up to
        ``_IDLE_CAP`` connections go back to a list here instead; the pool still counts them
        as in use, the same stale check runs, and they return to the pool at :meth:`close`
        or in a forked child never. A ``BlockingConnectionPool`` (a size the application
        waits on), a Sentinel pool (which re-checks the master on release) and any other
        subclass get every connection straight back.

        syncprims holds at most :attr:`share` of the pool's connections at once (kept ones
        included; :func:`pool_share`), so that the application's own commands always find
        one: a thread past the share waits for one of them to come back. A full pool (a
        ``ConnectionPool`` at ``max_connections``, a ``BlockingConnectionPool`` whose own
        wait ran out) is load, not an error either: the call waits for a connection, taking
        again with a short back-off. Both waits together last at most the reply timeout.

        Raises:
            ClientClosedError: after :meth:`close`.
            TransportError: no connection came within the reply timeout, or the pool could
                not connect one (``maybe_executed`` false).
        """
        if self._closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        conn = self.take_kept()
        if conn is not None:
            if not _stale(conn):
                return conn
            self._forget(conn)
        deadline = time.monotonic() + self.timeout  # a BlockingConnectionPool's own wait counts
        pause = 0.001
        while True:
            if self._claim(deadline):
                try:
                    conn = take(self.pool)
                except PoolExhaustedError as error:
                    self._unclaim()
                    last: BaseException = error
                except ERRORS.failures as error:
                    self._unclaim()
                    self.healthy = False
                    raise self._translate(error, context, sent=False) from error
                except BaseException:
                    self._unclaim()
                    raise
                else:
                    return conn
            else:
                last = PoolExhaustedError(f"syncprims holds its share, {self.share}")
            kept = self.take_kept()  # given back meanwhile (kept, not to the pool)
            if kept is not None:
                if not _stale(kept):
                    return kept
                self._forget(kept)
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

    def take_kept(self) -> Any:
        """A connection kept from an earlier call, not checked yet (:func:`_stale`), or
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

    def _forget(self, conn: Any) -> None:
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
            if _stale(conn) or not still_owned(self.pool, conn):
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

    async def eval(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        *,
        context: str,
        on_orphan: Orphan | None = None,
        asking: bool = False,
    ) -> Any:
        """Run ``script`` once (EVALSHA; SCRIPT LOAD and again on NOSCRIPT).

        ``asking`` sends ``ASKING`` first (a cluster ASK redirection). ``on_orphan`` is
        accepted for symmetry with the asyncio transport and ignored: a blocking call is not
        cancelled while a reply is in flight (an interrupt, e.g. ``KeyboardInterrupt``,
        drops the connection; the lease bounds what it leaves).

        Raises:
            RedisConnectionError, RedisTimeoutError: with ``maybe_executed`` set when the
                script may have run.
            ServerReplyError: Redis answered with an error.
        """
        return self._call(("EVALSHA", script.sha, len(keys), *keys, *args), context, script, asking)

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
        for its reply instead of the client's, for blocking commands; ``hold``: on a
        connection of syncprims' own, not the pool's, for a command Redis blocks, such as
        ``BLPOP``). Raises as :meth:`eval`."""
        return self._call(args, context, None, asking, timeout, hold=hold)

    async def eval_then(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        then: Sequence[str | int],
        *,
        then_timeout: float,
        context: str,
        on_orphan: Orphan | None = None,
        asking: bool = False,
    ) -> tuple[Any, Any]:
        """Run ``script`` once (as :meth:`eval`) and the plain command ``then`` right behind
        it, in one write on one connection: one round trip for both (an acquire and its
        ``WAIT``). ``then_timeout``: how long ``then`` itself may block in Redis (``WAIT``'s
        timeout), seconds; its reply is awaited that much longer than the usual timeout.

        Returns:
            The script's reply, and ``then``'s reply or the ``SyncPrimsError`` it failed with
            (the script's outcome is never lost to a failure of ``then``).

        Raises:
            As :meth:`eval`, for the script (``then``'s reply is read and dropped first).
        """
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        after_command = tuple(then)
        then_wait = self.timeout + then_timeout
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
            packed = pack(conn, command)
            for other in more:
                packed = packed + pack(conn, other)
            conn.send_packed_command(packed, check_health=False)
        except ERRORS.failures as error:
            conn.disconnect()
            self.healthy = False
            raise self._translate(error, context, sent=False) from error
        except BaseException:
            conn.disconnect()
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
                packed = pack(conn, command)
                if then is not None:
                    packed = packed + pack(conn, then)
                conn.send_packed_command(packed, check_health=False)
                sent = True
                reply = self._read(conn, wait)
        except ERRORS.response as error:
            raise self._translate(error, context, sent=sent) from error
        except ERRORS.failures as error:
            conn.disconnect()
            self.healthy = False
            raise self._translate(error, context, sent=sent) from error
        except BaseException:
            conn.disconnect()
            raise
        self.healthy = True
        return reply

    def _skip(self, conn: Any, timeout: float | None) -> None:
        """Read and drop one reply (an error reply too); close the connection if it fails."""
        try:
            self._read(conn, timeout)
        except ERRORS.response:
            pass
        except ERRORS.failures:
            conn.disconnect()
            self.healthy = False
        except BaseException:
            conn.disconnect()
            raise

    _read = staticmethod(read)

    def _translate(self, error: BaseException, context: str, *, sent: bool) -> SyncPrimsError:
        return translate(
            error, context=context, address=self.address, timeout=self.timeout, sent=sent
        )

    def close(self) -> None:
        """Refuse new calls (``ClientClosedError``) and give the kept connections back to the
        pool; the pool is closed by its owner."""
        self._closed = True
        while self._idle:
            try:
                conn = self._idle.pop()
            except IndexError:
                break
            if self._pid == _Process.pid:
                self._give(conn)
        while self._held:
            try:
                conn = self._held.pop()
            except IndexError:
                break
            if self._pid == _Process.pid:
                conn.disconnect()
        with self._freed:
            self._freed.notify_all()  # waiters see the client closed


def _stale(conn: Any) -> bool:
    """Whether a kept connection has unread data (a reply nobody read) or was closed by the
    server (a restart): an idle connection is readable only then. One ``select`` call, not
    redis-py's ``can_read()`` (three syscalls: it was 10% of a RedLock pair's CPU)."""
    sock = conn._sock
    if sock is None:
        return True
    try:
        if _buffered(conn):
            return True
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _stale_among(kept: dict[int, Any]) -> list[int]:
    """The keys of ``kept`` whose connection is stale (as :func:`_stale`), in one ``select``."""
    socks: dict[Any, int] = {}
    stale: list[int] = []
    for i, conn in kept.items():
        if conn is None:
            continue
        if conn._sock is None or _buffered(conn):
            stale.append(i)
        else:
            socks[conn._sock] = i
    if socks:
        try:
            readable, _, _ = select.select(list(socks), [], [], 0)
        except (OSError, ValueError):  # one of them closed: check each alone
            return [i for i, conn in kept.items() if conn is not None and _stale(conn)]
        stale.extend(socks[sock] for sock in readable)
    return stale


class Routed(NamedTuple):
    """One call of a fan-out, on the server it goes to."""

    server: SyncServer
    script: Script
    keys: Sequence[str]
    args: Sequence[str | int | bytes]
    context: str
    on_late: Callable[[Any], None] | None = None
    skip_if_busy: bool = False

    def command(self) -> tuple[Any, ...]:
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)


def fan_out(calls: Sequence[Routed], enough: Enough | None = None) -> list[Any]:
    """Run scripts on several servers at once from one thread: write all, then read the
    replies in the order they come (``select``).

    Each reply is awaited until its own server's timeout, counted from when its command was
    sent: the whole costs the slowest server, not the sum. With ``enough``, once
    ``enough(results)`` is true the others get a grace (as long again as it took to get
    there, at least ``MIN_GRACE``; a healthy set answers within it, so nothing is left
    behind); the calls still out after it go to their servers' :class:`LateLane`, which
    reads their replies in the background and hands them to ``on_late``. A server whose
    lane is still busy is not written to meanwhile: a ``skip_if_busy`` call fails at once
    (``RedisTimeoutError``, not run), another is queued in the lane and its reply awaited
    unless ``enough`` is already true (then ``PENDING``). So a frozen quorum member costs
    one connection and one timeout at a time, not one per attempt. Servers whose last call
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
    for i, call in enumerate(calls):
        lane = call.server.lane
        if lane.busy():
            if call.skip_if_busy:
                results[i] = RedisTimeoutError(
                    f"{call.context} skipped: {call.server.address} has not answered an "
                    f"earlier call yet",
                    maybe_executed=False,
                )
            else:
                queued[i] = lane.call(call, time.monotonic() + call.server.timeout)
        else:
            todo.append(i)
    conns = _checkout_all(calls, todo, results)
    in_flight: dict[int, Any] = {}
    deadlines: dict[int, float] = {}
    commands = {i: calls[i].command() for i in todo}  # sent, and re-sent on NOSCRIPT
    try:
        for i in todo:
            if i not in conns:
                continue
            call = calls[i]
            conn = conns.pop(i)
            try:
                call.server.send(conn, commands[i], call.context)
            except SyncPrimsError as error:
                call.server.checkin(conn)
                results[i] = error
                continue
            in_flight[i] = conn
            deadlines[i] = time.monotonic() + call.server.timeout
        started = time.monotonic()
        stop_at = math.inf  # once enough: the end of the grace (see fan_out's docstring)
        while in_flight:
            if stop_at == math.inf and enough is not None and enough(results):
                now = time.monotonic()
                stop_at = now + max(MIN_GRACE, now - started)
            ready = _readable(in_flight, deadlines, stop_at)
            if ready is None:  # the grace is over: the rest finishes in the background
                break
            for i in ready:
                conn = in_flight.pop(i)
                call = calls[i]
                # Readable, so the reply is (nearly) all there: read it with the socket's own
                # timeout (no settimeout calls) unless most of the call's time is used up.
                left = max(0.001, deadlines[i] - time.monotonic())
                timeout = None if left > call.server.timeout / 2 else left
                try:
                    results[i] = call.server.receive(
                        conn, commands[i], call.context, call.script, timeout=timeout
                    )
                except SyncPrimsError as error:
                    results[i] = error
                finally:
                    call.server.checkin(conn)
        for i in list(in_flight):
            call = calls[i]
            call.server.lane.finish(call, in_flight.pop(i), deadlines[i])
        for i, handoff in queued.items():  # calls queued behind a busy server's lane
            if enough is not None and enough(results):
                handoff.abandon()
            else:
                results[i] = handoff.take()
    finally:
        for i, conn in [*in_flight.items(), *conns.items()]:  # interrupted: drop the rest
            calls[i].server.discard(conn)
    return results


def _readable(
    in_flight: dict[int, Any], deadlines: dict[int, float], stop_at: float
) -> list[int] | None:
    """The in-flight calls with a reply to read, or past their deadline (reading them raises
    the timeout), waiting until there is one; ``None`` when ``stop_at`` came first."""
    ready = [i for i, conn in in_flight.items() if _buffered(conn)]
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


def _buffered(conn: Any) -> bool:
    """Whether a TLS socket holds decrypted bytes ``select`` cannot see (a plain socket is
    told apart by its type first: the fan-out asks this of every connection it waits on)."""
    sock = conn._sock
    if type(sock) is socket.socket:
        return False
    pending = getattr(sock, "pending", None)
    return bool(pending()) if pending is not None else False


def _checkout_all(
    calls: Sequence[Routed], todo: Sequence[int], results: list[Any]
) -> dict[int, Any]:
    """A connection per call of ``todo``; failures go to ``results``.

    Kept connections are checked for staleness together: one ``select`` for all of them,
    where one per connection made 10 of a RedLock x5 pair's syscalls (docs/design.md)."""
    conns: dict[int, Any] = {}
    sick = [i for i in todo if not calls[i].server.healthy]
    if len(sick) < 2:
        sick = []
    kept = {i: calls[i].server.take_kept() for i in todo if i not in sick}
    for i in _stale_among(kept):
        calls[i].server._forget(kept.pop(i))
    for i, conn in kept.items():
        if conn is not None:
            conns[i] = conn
    if len(conns) == len(todo):
        return conns
    lock = threading.Lock()

    def take(i: int) -> None:
        call = calls[i]
        try:
            conn = call.server.checkout(call.context)
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
        and then it goes to the call's ``on_late``."""
        self._done.wait(max(0.0, self._deadline - time.monotonic()) + 0.05)
        with self._lock:
            if self._value is PENDING:
                self._abandoned = True
            return self._value

    def abandon(self) -> None:
        """The fan-out no longer needs it: its reply goes to the call's ``on_late``."""
        with self._lock:
            self._abandoned = True


class LateLane:
    """Finishes, on a thread of its own, the calls of one server that a fan-out stopped
    waiting for, and the calls queued behind them, in order, each within its deadline.

    A reply goes to the call's ``on_late``; a call past its deadline is dropped (its
    connection closed): what it may have taken expires by its lease. The thread exits when
    the lane has been empty for a second.
    """

    IDLE_EXIT = 1.0

    def __init__(self, server: SyncServer) -> None:
        self._server = server
        self._jobs: deque[tuple[Routed, Any, float, Handoff | None]] = deque()
        self._cond = threading.Condition()
        self._running = False
        self._outstanding = 0

    def busy(self) -> bool:
        """Whether calls are still being finished (the server may be sick)."""
        return self._outstanding > 0

    def finish(self, call: Routed, conn: Any, deadline: float) -> None:
        """Read the reply of ``call``, already sent on ``conn``, before ``deadline``."""
        self._put((call, conn, deadline, None))

    def call(self, call: Routed, deadline: float) -> Handoff:
        """Send ``call`` once the calls before it are finished, and read its reply."""
        handoff = Handoff(deadline)
        self._put((call, None, deadline, handoff))
        return handoff

    def _put(self, job: tuple[Routed, Any, float, Handoff | None]) -> None:
        with self._cond:
            self._jobs.append(job)
            self._outstanding += 1
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

    def _finish(self, call: Routed, conn: Any, deadline: float, handoff: Handoff | None) -> None:
        server = self._server
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
        try:
            if conn is None:
                conn = server.checkout(call.context)
                server.send(conn, call.command(), call.context)
            try:
                command = call.command()
                reply = server.receive(conn, command, call.context, call.script, timeout=left)
            finally:
                server.checkin(conn)
        except SyncPrimsError as error:
            if handoff is None or not handoff.set(error):
                log.debug("%s: the late call failed: %r", call.context, error)
            return
        if handoff is not None and handoff.set(reply):
            return  # its fan-out takes it
        if call.on_late is not None:
            try:
                call.on_late(reply)
            except Exception:
                log.exception("%s: handling a late reply failed; its lease bounds it", call.context)
