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
  connection and reads its reply once (``send_packed_command`` / ``read_response``), and
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

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis.exceptions

from syncprims._protocol.contracts import Orphan
from syncprims._protocol.scripts import Script
from syncprims._transport.errors import ClusterRedirectError, pack, translate
from syncprims.errors import ClientClosedError, SyncPrimsError

__all__ = ["SyncServer", "fan_out"]

_FAILURES = (redis.exceptions.RedisError, OSError)
_IDLE_CAP = 8  # connections a server keeps checked out between calls (see checkout())


class SyncServer:
    """Calls on one server (or sentinel-managed master) through a blocking redis-py pool.

    Args:
        pool: the redis-py pool (any kind: ``ConnectionPool``, ``BlockingConnectionPool``,
            ``SentinelConnectionPool``, fakeredis').
        address: where the server is, for messages.
        timeout: the longest wait for one reply, seconds.
    """

    def __init__(self, pool: Any, *, address: str, timeout: float) -> None:
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
        self._idle_cap = _IDLE_CAP if type(pool) is redis.ConnectionPool else 0
        self._pid = os.getpid()

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

        Raises:
            ClientClosedError: after :meth:`close`.
            TransportError: the pool could not give one (``maybe_executed`` false).
        """
        if self._closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        if self._idle:
            try:
                conn = self._idle.pop()
            except IndexError:  # another thread took the last one
                pass
            else:
                if self._pid == os.getpid() and not _stale(conn):
                    return conn
                self._forget(conn)
        try:
            return self.pool.get_connection()
        except _FAILURES as error:
            self.healthy = False
            raise self._translate(error, context, sent=False) from error

    def checkin(self, conn: Any) -> None:
        """Give a connection back (kept for the next call when there is room)."""
        if len(self._idle) < self._idle_cap and not self._closed and conn._sock is not None:
            self._idle.append(conn)
        else:
            self.pool.release(conn)

    def discard(self, conn: Any) -> None:
        """Give back a connection whose state is unknown (closed first)."""
        conn.disconnect()
        self.pool.release(conn)

    def _forget(self, conn: Any) -> None:
        if self._pid != os.getpid():
            return  # the parent's connection: the pool of this child resets itself
        self.discard(conn)

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
    ) -> Any:
        """Run one plain command once (``route``: its key, for a cluster; ``timeout``: seconds
        for its reply instead of the client's, for blocking commands). Raises as :meth:`eval`."""
        return self._call(args, context, None, asking, timeout)

    def _call(
        self,
        command: tuple[Any, ...],
        context: str,
        script: Script | None,
        asking: bool = False,
        timeout: float | None = None,
    ) -> Any:
        conn = self.checkout(context)
        try:
            if asking:
                self.send(conn, ("ASKING",), context)
            self.send(conn, command, context)
            if asking:
                self.receive(conn, ("ASKING",), context, None)
            reply = self.receive(conn, command, context, script, asking, timeout=timeout)
        except BaseException:
            self.checkin(conn)  # send/receive disconnected it if its state is unknown
            raise
        self.checkin(conn)
        return reply

    def send(self, conn: Any, command: tuple[Any, ...], context: str) -> None:
        """Write a command; a failure here means it did not run."""
        try:
            conn.send_packed_command(pack(conn, command), check_health=False)
        except _FAILURES as error:
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
    ) -> Any:
        """Read the reply of a command sent by :meth:`send` (SCRIPT LOAD and again on
        NOSCRIPT); ``timeout``: seconds to wait for it instead of the usual."""
        sent = True
        wait = timeout if timeout is not None else self._read_timeout
        try:
            try:
                reply = self._read(conn, wait)
            except redis.exceptions.NoScriptError:
                if script is None:
                    raise
                sent = False  # NOSCRIPT: it did not run
                conn.send_command("SCRIPT", "LOAD", script.source, check_health=False)
                self._read(conn, wait)
                if asking:
                    conn.send_command("ASKING", check_health=False)
                    self._read(conn, wait)
                conn.send_packed_command(pack(conn, command), check_health=False)
                sent = True
                reply = self._read(conn, wait)
        except redis.exceptions.ResponseError as error:
            raise self._translate(error, context, sent=sent) from error
        except _FAILURES as error:
            conn.disconnect()
            self.healthy = False
            raise self._translate(error, context, sent=sent) from error
        except BaseException:
            conn.disconnect()
            raise
        self.healthy = True
        return reply

    @staticmethod
    def _read(conn: Any, timeout: float | None) -> Any:
        if timeout is None:
            return conn.read_response(disable_decoding=True, push_request=True)
        return conn.read_response(disable_decoding=True, push_request=True, timeout=timeout)

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
            if self._pid == os.getpid():
                self.pool.release(conn)


def _stale(conn: Any) -> bool:
    """Whether a kept connection has unread data (a reply nobody read) or was closed."""
    if conn._sock is None:
        return True
    try:
        return bool(conn.can_read())
    except _FAILURES:
        return True


def fan_out(
    calls: Sequence[tuple[SyncServer, Script, Sequence[str], Sequence[str | int | bytes], str]],
) -> list[Any]:
    """Run scripts on several servers at once from one thread: write all, then read all.

    Each reply is awaited until its own server's timeout, counted from when its command was
    sent (not from when its turn to be read comes): the whole costs the slowest server, not
    the sum, even when several servers do not answer. Servers whose last call failed get
    their connection from the pool on a thread each, at once (a frozen server that accepts
    connections costs its connect timeout once, not once per such server).

    Returns:
        One entry per call: the reply, or the ``SyncPrimsError`` it failed with (a cluster
        redirection comes back as a ``ClusterRedirectError`` for the caller to follow).
    """
    results: list[Any] = [None] * len(calls)
    conns = _checkout_all(calls, results)
    in_flight: list[tuple[int, Any]] = []
    deadlines: dict[int, float] = {}
    try:
        for i, (server, script, keys, args, context) in enumerate(calls):
            if i not in conns:
                continue
            conn = conns.pop(i)
            command = ("EVALSHA", script.sha, len(keys), *keys, *args)
            try:
                server.send(conn, command, context)
            except SyncPrimsError as error:
                server.checkin(conn)
                results[i] = error
                continue
            in_flight.append((i, conn))
            deadlines[i] = time.monotonic() + server.timeout
        while in_flight:
            i, conn = in_flight.pop(0)
            server, script, keys, args, context = calls[i]
            command = ("EVALSHA", script.sha, len(keys), *keys, *args)
            left = max(0.001, deadlines[i] - time.monotonic())
            try:
                results[i] = server.receive(conn, command, context, script, timeout=left)
            except SyncPrimsError as error:
                results[i] = error
            finally:
                server.checkin(conn)
    finally:
        for i, conn in [*in_flight, *conns.items()]:  # interrupted: drop what was not read
            calls[i][0].discard(conn)
    return results


def _checkout_all(
    calls: Sequence[tuple[SyncServer, Any, Any, Any, str]], results: list[Any]
) -> dict[int, Any]:
    """A connection per call; failures go to ``results``."""
    conns: dict[int, Any] = {}
    sick = [i for i, call in enumerate(calls) if not call[0].healthy]
    if len(sick) < 2:
        sick = []
    lock = threading.Lock()

    def take(i: int) -> None:
        server, context = calls[i][0], calls[i][4]
        try:
            conn = server.checkout(context)
        except SyncPrimsError as error:
            results[i] = error
            return
        with lock:
            conns[i] = conn

    threads = [threading.Thread(target=take, args=(i,), daemon=True) for i in sick]
    for thread in threads:
        thread.start()
    try:
        for i in range(len(calls)):
            if i not in sick:
                take(i)
    finally:
        for thread in threads:
            thread.join()
    return conns


def is_redirect(reply: object) -> bool:
    """Whether a fan-out result is a cluster redirection to follow alone."""
    return isinstance(reply, ClusterRedirectError)
