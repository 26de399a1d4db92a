"""Single-attempt commands over blocking redis-py connections, safe across threads.

Like :mod:`syncprims._transport.aio`, this drives redis-py's ``Connection`` directly
(``send_packed_command`` / ``read_response``) from a small LIFO pool: measured here, that is
about 1.5x faster per command than ``Redis.evalsha`` (which adds a retry wrapper, per-command
bookkeeping and a readability poll when it takes a pooled connection). The socket timeout
(``Config.timeout``) bounds every read. Transport retries are off: the caller decides.

The methods are ``async def`` so that the shared core can await them, but they never
suspend: they block the calling thread and return, which lets the sync face run the core
coroutine to completion in one step.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis.exceptions

from syncprims._protocol.scripts import Script
from syncprims._transport.aio import Orphan
from syncprims._transport.connections import ConnectionSpec, pack, translate
from syncprims.errors import ClientClosedError, RedisConnectionError, SyncPrimsError

__all__ = ["SyncConnections", "fan_out"]


def _discard_if_stale(conn: Any) -> None:
    """Disconnect a pooled connection that the server closed (or that holds unread data).

    After a server restart every pooled socket is dead; without this check the next command
    on each would be written into the void and fail *after* sending, which an acquire may not
    retry. redis-py's own pool makes the same check; it costs ~2.5 us here.
    """
    if not conn.is_connected:
        return  # it connects when the command is sent (no probe: that would handshake here)
    try:
        if conn.can_read():
            conn.disconnect()
    except (redis.exceptions.RedisError, OSError):
        conn.disconnect()


class SyncConnections:
    """A thread-safe LIFO pool of blocking connections; reset in a forked child."""

    def __init__(
        self, spec: ConnectionSpec, *, timeout: float, max_connections: int | None
    ) -> None:
        self._spec = spec
        self.timeout = timeout
        self._max = max_connections
        self._free: deque[Any] = deque()
        self._slots = threading.BoundedSemaphore(max_connections) if max_connections else None
        self._pid = os.getpid()
        self._closed = False

    @property
    def address(self) -> str:
        """The server, for messages."""
        return self._spec.address

    def _get(self, context: str) -> Any:
        if self._closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        if self._pid != os.getpid():
            self.forget()
        if self._slots is not None and not self._slots.acquire(True, self.timeout):
            raise RedisConnectionError(
                f"all {self._max} connections to Redis at {self.address} stayed busy for "
                f"{self.timeout:g} s while {context}",
                maybe_executed=False,
            )
        try:
            conn = self._free.pop()
        except IndexError:
            return self._spec.make()
        _discard_if_stale(conn)
        return conn

    def _put(self, conn: Any) -> None:
        if self._closed:
            conn.disconnect()  # closed meanwhile: nobody would ever close it
        else:
            self._free.append(conn)
        if self._slots is not None:
            self._slots.release()

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
        accepted for symmetry with the asyncio transport and ignored: a
        blocking call is not cancelled while a reply is in flight (an interrupt, e.g.
        ``KeyboardInterrupt``, drops the connection; the lease bounds what it leaves).

        Raises:
            RedisConnectionError, RedisTimeoutError: with ``maybe_executed`` set when the
                script may have run.
            ServerReplyError: Redis answered with an error.
        """
        return self._call(("EVALSHA", script.sha, len(keys), *keys, *args), context, script, asking)

    async def command(
        self, *args: str | int, context: str, route: str | None = None, asking: bool = False
    ) -> Any:
        """Run one plain command once (``route``: its key, for a cluster).

        Raises as :meth:`eval`.
        """
        return self._call(args, context, None, asking)

    def route(self, keys: Sequence[str]) -> SyncConnections:
        """The pool for ``keys``: this one (a cluster router picks the node's)."""
        return self

    def _call(
        self, command: tuple[Any, ...], context: str, script: Script | None, asking: bool = False
    ) -> Any:
        conn = self._get(context)
        try:
            if asking:
                self._send(conn, ("ASKING",), context)
            self._send(conn, command, context)
            if asking:
                self._receive(conn, ("ASKING",), context, None)
            return self._receive(conn, command, context, script, asking)
        finally:
            self._put(conn)

    def _send(self, conn: Any, command: tuple[Any, ...], context: str) -> None:
        """Write a command; a failure here means it did not run."""
        try:
            if not conn.is_connected:
                # Through connect(): a sentinel-managed connection finds the master there
                # (send_packed_command would connect to its default address instead).
                conn.connect()
            conn.send_packed_command(pack(conn, command), check_health=False)
        except (redis.exceptions.RedisError, OSError) as error:
            conn.disconnect()
            raise self._translate(error, context, sent=False) from error
        except BaseException:
            conn.disconnect()
            raise

    def _receive(
        self,
        conn: Any,
        command: tuple[Any, ...],
        context: str,
        script: Script | None,
        asking: bool = False,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Read the reply of a command sent by :meth:`_send` (SCRIPT LOAD and again on NOSCRIPT).

        ``timeout``: seconds to wait for the (first) reply instead of the pool's timeout.
        """
        sent = True
        try:
            try:
                if timeout is not None:
                    return conn.read_response(disconnect_on_error=True, timeout=timeout)
                return conn.read_response(disconnect_on_error=True)
            except redis.exceptions.NoScriptError:
                if script is None:
                    raise
                sent = False  # NOSCRIPT: it did not run
                conn.send_command("SCRIPT", "LOAD", script.source, check_health=False)
                conn.read_response()
                if asking:
                    conn.send_command("ASKING", check_health=False)
                    conn.read_response()
                conn.send_packed_command(pack(conn, command), check_health=False)
                sent = True
                return conn.read_response()
        except redis.exceptions.ResponseError as error:
            raise self._translate(error, context, sent=sent) from error
        except (redis.exceptions.RedisError, OSError) as error:
            conn.disconnect()
            raise self._translate(error, context, sent=sent) from error
        except BaseException:
            conn.disconnect()
            raise

    def _translate(self, error: BaseException, context: str, *, sent: bool) -> Exception:
        return translate(
            error, context=context, address=self.address, timeout=self.timeout, sent=sent
        )

    def close(self) -> None:
        """Disconnect idle connections; later calls raise ``ClientClosedError``."""
        self._closed = True
        free, self._free = self._free, deque()
        for conn in free:
            conn.disconnect()
        self._spec.close()

    def forget(self) -> None:
        """After ``os.fork()``, in the child: drop the parent's sockets without closing them."""
        self._pid = os.getpid()
        self._free = deque()
        if self._max:
            self._slots = threading.BoundedSemaphore(self._max)


def fan_out(
    calls: Sequence[
        tuple[SyncConnections, Script, Sequence[str], Sequence[str | int | bytes], str]
    ],
) -> list[Any]:
    """Run scripts on several servers at once from one thread: write all, then read all.

    Each reply is awaited until its own server's timeout, counted from when its command was
    sent (not from when its turn to be read comes): the whole costs the slowest server, not
    the sum, even when several servers do not answer.

    Returns:
        One entry per call: the reply, or the ``SyncPrimsError`` it failed with.
    """
    results: list[Any] = [None] * len(calls)
    in_flight: list[tuple[int, Any]] = []
    deadlines: dict[int, float] = {}
    conns: dict[int, Any] = {}
    try:
        for i, (pool, _script, _keys, _args, context) in enumerate(calls):
            try:
                conns[i] = pool._get(context)
            except SyncPrimsError as error:
                results[i] = error
        _connect_in_parallel(calls, conns, results)
        for i, (pool, script, keys, args, context) in enumerate(calls):
            if i not in conns:
                continue
            conn = conns.pop(i)
            command = ("EVALSHA", script.sha, len(keys), *keys, *args)
            try:
                pool._send(conn, command, context)
            except SyncPrimsError as error:
                pool._put(conn)
                results[i] = error
                continue
            in_flight.append((i, conn))
            deadlines[i] = time.monotonic() + pool.timeout
        while in_flight:
            i, conn = in_flight.pop(0)
            pool, script, keys, args, context = calls[i]
            command = ("EVALSHA", script.sha, len(keys), *keys, *args)
            left = max(0.001, deadlines[i] - time.monotonic())
            try:
                results[i] = pool._receive(conn, command, context, script, timeout=left)
            except SyncPrimsError as error:
                results[i] = error
            finally:
                pool._put(conn)
    finally:
        for i, conn in [*in_flight, *conns.items()]:  # interrupted: drop what was not read
            conn.disconnect()
            calls[i][0]._put(conn)
    return results


def _connect_in_parallel(
    calls: Sequence[tuple[SyncConnections, Any, Any, Any, str]],
    conns: dict[int, Any],
    results: list[Any],
) -> None:
    """Open the not yet connected connections of a fan-out at once, one thread each: a
    server that accepts connections but does not answer (a frozen process) costs its
    timeout once, not once per such server. Failed ones move from ``conns`` to ``results``."""
    fresh = [i for i, conn in conns.items() if not conn.is_connected]
    if len(fresh) < 2:
        return  # connected by the send, as usual
    errors: dict[int, BaseException] = {}

    def connect(i: int) -> None:
        try:
            conns[i].connect()
        except (redis.exceptions.RedisError, OSError) as error:
            errors[i] = error

    threads = [threading.Thread(target=connect, args=(i,), daemon=True) for i in fresh]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, error in errors.items():
        pool, context = calls[i][0], calls[i][4]
        conn = conns.pop(i)
        conn.disconnect()
        pool._put(conn)
        results[i] = pool._translate(error, context, sent=False)
