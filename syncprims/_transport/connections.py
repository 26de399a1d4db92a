"""The one place syncprims touches a client library's connection internals.

syncprims drives the connections of the application's own client directly (one attempt per
command, replies as bytes, its own deadlines: see :mod:`syncprims._transport.sync`). Those
internals differ between the client libraries and versions it accepts, redis-py 5.0 to 8.x
and valkey-py 6.x (a redis-py fork); everything else in the transport speaks only this
module's version-neutral interface:

===============================  =========================================================
operation                        where the libraries differ, and the fallback taken
===============================  =========================================================
:func:`take` / :func:`atake`     ``get_connection()`` needs a command name in redis-py
                                 < 5.3 and valkey-py 6 (newer ones warn when given one):
                                 the name is passed only where the signature requires it.
:func:`give` / :func:`agive`     the same in every version (``pool.release(conn)``).
:func:`read`                     ``read_response(timeout=...)`` exists from redis-py 8.0
                                 on; before (and in valkey-py) the socket's timeout is
                                 set around the read and restored after it, which is what
                                 redis-py 8 itself does inside its parser.
:func:`read_message`             ``can_read()`` before redis-py 8 (and in valkey-py)
                                 pre-reads the next reply, decoded when the client has
                                 ``decode_responses=True``: it is encoded back to bytes.
:func:`aread`                    the same call in every version: ``timeout=math.inf``
                                 means "no timer" to redis-py 8 and an unbounded timer to
                                 older ones (the caller bounds the call itself).
:func:`read_in_callback`         the asyncio replies parsed in the transport's protocol
                                 callback: only where redis-py's asyncio hiredis parser is
                                 in the form :func:`direct_replies` knows (redis-py 5.3 to
                                 8); any other parser (pure Python, fakeredis') is read by
                                 a task with :func:`aread`.
:func:`astale`                  redis-py 8's asyncio ``can_read()`` is
                                 ``can_read_destructive()`` before 8.0 and in valkey-py:
                                 it may consume a byte, so it is asked only of a
                                 connection that is dropped when the answer is yes.
:data:`ERRORS`                   valkey-py's exception classes are not redis-py's: each
                                 family is a tuple of both once valkey-py is in use
                                 (:func:`use_valkey`), so ``except ERRORS.response`` and
                                 ``isinstance(error, ERRORS.timeout)`` catch either.
===============================  =========================================================

Which path a connection takes is decided once per connection (or pool) class, from its
method's signature, never from a version number; ``tests/test_compat.py`` runs both paths on
every redis-py, and CI runs the real-server suite on each redis-py line (docs/compatibility.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import math
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import redis
import redis.asyncio
import redis.exceptions

log = logging.getLogger("syncprims.transport")

__all__ = [
    "ERRORS",
    "POOLS",
    "PoolExhaustedError",
    "agive",
    "aread",
    "astale",
    "atake",
    "give",
    "is_plain_pool",
    "amove_slot",
    "move_slot",
    "own_connection",
    "at_eof",
    "direct_replies",
    "still_owned",
    "pool_share",
    "node_pool",
    "read",
    "read_in_callback",
    "read_message",
    "readable",
    "take",
    "use_valkey",
    "valkey_if_imported",
    "write_now",
]

_COMMAND_NAME = "EVALSHA"  # what an old get_connection() is told (it does not use it)


def _accepts(function: Any, name: str) -> bool:
    """Whether ``function`` takes the keyword argument ``name`` (or any keyword)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # pragma: no cover - a C function: assume the old API
        return False
    if name in parameters:
        return parameters[name].kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _needs_command_name(function: Any) -> bool:
    """Whether ``get_connection`` has a required ``command_name`` (redis-py < 5.3)."""
    try:
        parameter = inspect.signature(function).parameters.get("command_name")
    except (TypeError, ValueError):  # pragma: no cover
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


class _ByClass:
    """A per-class answer to ``question(cls)``, computed on first use (a dict lookup
    afterwards)."""

    def __init__(self, question: Callable[[type], bool]) -> None:
        self._question = question
        self._answers: dict[type, bool] = {}

    def __call__(self, obj: object) -> bool:
        cls = type(obj)
        answer = self._answers.get(cls)
        if answer is None:
            answer = self._answers[cls] = bool(self._question(cls))
        return answer


_take_needs_name = _ByClass(lambda cls: _needs_command_name(cls.get_connection))  # type: ignore[attr-defined]
_read_has_timeout = _ByClass(lambda cls: _accepts(cls.read_response, "timeout"))  # type: ignore[attr-defined]
_has_can_read = _ByClass(lambda cls: callable(getattr(cls, "can_read", None)))


class PoolExhaustedError(Exception):
    """The pool had no free connection: a ``ConnectionPool`` at ``max_connections``, or a
    ``BlockingConnectionPool`` whose own wait ran out. Load, not a failure: the caller waits
    and takes again within its timeout."""


# Before redis-py 6 (and in valkey-py) a full pool raises a plain ConnectionError with one
# of these texts; redis-py 6+ raises MaxConnectionsError for the first. Read here only.
_EXHAUSTED = ("Too many connections", "No connection available.")


def _exhausted(error: BaseException) -> bool:
    return isinstance(error, ERRORS.max_connections) or (
        isinstance(error, ERRORS.connection) and str(error) in _EXHAUSTED
    )


# -- blocking connections ---------------------------------------------------------------------


def take(pool: Any) -> Any:
    """A connection from a blocking pool (``pool.get_connection()``).

    Raises:
        PoolExhaustedError: the pool has no free connection (load: take again later).
        What the pool raises otherwise (``ConnectionError`` when connecting fails...).
    """
    try:
        if _take_needs_name(pool):
            return pool.get_connection(_COMMAND_NAME)
        return pool.get_connection()
    except ERRORS.connection as error:
        if _exhausted(error):
            raise PoolExhaustedError(str(error)) from error
        raise


def own_connection(pool: Any) -> Any:
    """A new, unconnected connection with ``pool``'s settings (host, TLS, credentials,
    database, client name, timeouts) that is not the pool's: it never counts against the
    pool's size, and is closed by its owner, not given back. (``pool.make_connection()``
    counts it in redis-py's blocking pools.) For a subscription or a shared connection,
    which would otherwise hold one of the application's pooled connections for good."""
    return pool.connection_class(**pool.connection_kwargs)


def still_owned(pool: Any, conn: Any) -> bool:
    """Whether a connection of syncprims' own made with ``pool``'s settings still goes where
    the pool's would: a Sentinel pool's, to the current master (``owns_connection``, which
    the pool checks for its own on release; after a failover a kept connection may still
    point at the demoted master, where a ``BLPOP`` blocks and never sees a grant)."""
    owns = getattr(pool, "owns_connection", None)
    return owns is None or bool(owns(conn))


def give(pool: Any, conn: Any) -> None:
    """Give a connection back to its pool."""
    pool.release(conn)


def read(conn: Any, timeout: float | None) -> Any:
    """Read one reply as bytes (push messages included, for RESP3), waiting at most
    ``timeout`` seconds (``None``: the connection's own socket timeout).

    Raises:
        What ``read_response`` raises: the library's ``TimeoutError`` when no reply came in
        time, ``ConnectionError``, a ``ResponseError`` for an error reply.
    """
    if timeout is None:
        return conn.read_response(disable_decoding=True, push_request=True)
    if _read_has_timeout(conn):
        return conn.read_response(disable_decoding=True, push_request=True, timeout=timeout)
    sock = conn._sock
    settimeout = getattr(sock, "settimeout", None)
    if settimeout is None:  # not connected (reading says so) or not a socket
        return conn.read_response(disable_decoding=True, push_request=True)
    settimeout(timeout)
    try:
        return conn.read_response(disable_decoding=True, push_request=True)
    finally:
        if conn._sock is sock:  # not disconnected by the read
            with contextlib.suppress(OSError):  # closed under us
                settimeout(conn.socket_timeout)


def readable(conn: Any, timeout: float) -> bool:
    """Whether a reply or message can be read within ``timeout`` seconds (``can_read``);
    read it with :func:`read_message`."""
    return bool(conn.can_read(timeout=timeout))


def read_message(conn: Any) -> Any:
    """Read one pub/sub reply (a message, a confirmation) as bytes, after :func:`readable`.

    Before redis-py 8 (and in valkey-py) the hiredis parser's ``can_read`` takes the next
    reply out of the parser already *decoded* when the client has ``decode_responses=True``,
    and the following ``read_response(disable_decoding=True)`` hands that one back as text;
    it is encoded again here (UTF-8, as every name syncprims publishes on).
    """
    reply = read(conn, None)
    # A list, or a RESP3 push message (hiredis' PushNotification, a list subclass).
    if isinstance(reply, list) and reply and isinstance(reply[0], str):
        return [part.encode() if isinstance(part, str) else part for part in reply]
    return reply


# -- asyncio connections ----------------------------------------------------------------------


async def atake(pool: Any) -> Any:
    """A connection from a ``redis.asyncio`` (or ``valkey.asyncio``) pool.

    Raises:
        PoolExhaustedError: as :func:`take`.
    """
    try:
        if _take_needs_name(pool):
            return await pool.get_connection(_COMMAND_NAME)
        return await pool.get_connection()
    except ERRORS.connection as error:
        if _exhausted(error):
            raise PoolExhaustedError(str(error)) from error
        raise


def write_now(conn: Any, chunks: list[Any]) -> None:
    """Write packed commands on an asyncio connection without waiting (the multiplexer's
    auto-pipelining: the bytes go to the transport's buffer, which the event loop sends;
    a broken connection shows on its reader). The stream writer is ``_writer`` in every
    redis-py from 5.0 and in valkey-py.

    Raises:
        ConnectionError: the connection is not open.
    """
    writer = conn._writer
    if writer is None:
        raise ConnectionError("the connection is not open")
    writer.writelines(chunks)


async def agive(pool: Any, conn: Any) -> None:
    """Give a connection back to its asyncio pool."""
    await pool.release(conn)


async def aread(conn: Any, *, push_request: bool = True) -> Any:
    """Read one reply as bytes, with no deadline of the library's own (the caller bounds
    the call); an error reply does not disconnect. ``push_request=False``: a RESP3 push
    message (not a reply) goes to the library's push handlers and the read goes on to the
    reply (for a connection whose replies are matched in order: the multiplexer).

    A ``None`` from ``read_response`` is a nil reply, or a socket error it swallowed: on
    Python 3.11+ ``asyncio.TimeoutError`` is the builtin ``TimeoutError``, an ``OSError``, so
    ``read_response(timeout=...)`` takes a socket's ETIMEDOUT (a keepalive or
    ``TCP_USER_TIMEOUT`` that gave up) for its own timer running out and returns ``None``,
    which is an acquire script's "acquired". So a ``None`` counts only if the connection's
    stream holds no error (a real nil reply read just before the stream failed is then
    reported as the failure too: the call may have run, the safe answer).

    Raises:
        ConnectionError: the stream failed (the builtin class, an ``OSError``; the
            library's own when it says so itself).
        What ``read_response`` raises otherwise.
    """
    reply = await conn.read_response(
        disable_decoding=True,
        timeout=math.inf,
        disconnect_on_error=False,
        push_request=push_request,
    )
    if reply is None:
        failed = _stream_error(conn)
        if failed is not None:
            raise ConnectionError(f"error while reading: {failed!r}") from failed
    return reply


def _stream_error(conn: Any) -> BaseException | None:
    """The error an asyncio connection's stream failed with, if any (``None`` for a
    connection without a standard ``asyncio.StreamReader``, such as fakeredis')."""
    stream = getattr(conn, "_reader", None)
    exception = getattr(stream, "exception", None)
    if not callable(exception):
        return None
    failed = exception()
    return failed if isinstance(failed, BaseException) else None


class DirectReplies:
    """The replies of an asyncio connection read through its hiredis reader and stream
    directly (see :func:`direct_replies`): what ``read_response`` does for one reply, less
    its four coroutine layers and the address it formats, per reply."""

    __slots__ = ("_broken", "_gets", "_handle_push", "_none", "_push", "_size", "_stream", "feed")

    def __init__(
        self, parser: Any, none: object, push: type | None, broken: type[BaseException]
    ) -> None:
        reader = parser._reader
        self._broken = broken  # the library's ConnectionError: raised, as read_response does
        self._gets = reader.gets
        self.feed = reader.feed
        self._stream = parser._stream
        self._size = getattr(parser, "_read_size", 65536)
        self._none = none
        self._push = push
        self._handle_push = parser.handle_push_response if push is not None else None

    async def next(self) -> Any:
        """The next reply as bytes (an error reply as its exception, not raised); a RESP3
        push message goes to the library's push handler and the read goes on.

        Raises:
            ConnectionError: the server closed the connection, or reading failed.
            The parser's protocol error: the stream is out of step.
        """
        while True:
            reply = self.parsed()
            if reply is self._none:
                try:
                    data = await self._stream.read(self._size)
                except OSError as error:
                    raise ConnectionError(f"error while reading: {error}") from error
                if not data:
                    raise ConnectionError("the server closed the connection")
                self.feed(data)
                continue
            if self.is_push(reply):
                assert self._handle_push is not None
                await self._handle_push(reply)
                continue
            return reply

    def parsed(self) -> Any:
        """The next reply the reader holds whole, or ``NOT_ENOUGH_DATA`` (``_none``); an
        error reply as its exception value (not raised).

        Raises:
            ConnectionError: the library's, as a reply (e.g. LOADING): read_response raises it.
        """
        reply = self._gets(False)
        if isinstance(reply, self._broken):
            raise reply
        return reply

    def is_push(self, reply: Any) -> bool:
        """Whether ``reply`` is a RESP3 push message (not a reply)."""
        return self._push is not None and isinstance(reply, self._push)


def direct_replies(conn: Any) -> DirectReplies | None:
    """A :class:`DirectReplies` for ``conn`` (connected) when its parser is redis-py's
    asyncio hiredis parser in a form known here (redis-py 5.3 to 8: a hiredis ``Reader``
    that returns ``NOT_ENOUGH_DATA`` and error replies as exceptions, the connection's
    stream, no reply held back by ``can_read``), and a RESP3 push message can be told
    apart from a reply (hiredis >= 3.2) or none can come (RESP2); else ``None``: the
    multiplexer's reader then reads with ``read_response`` (:func:`aread`), as it does for a
    connection class whose ``read_response`` is not redis-py's own (fakeredis)."""
    parser = getattr(conn, "_parser", None)
    if type(parser).__name__ != "_AsyncHiredisParser":
        return None
    reads = next((c for c in type(conn).__mro__ if "read_response" in vars(c)), None)
    if reads is None or reads.__module__ != "redis.asyncio.connection":
        return None  # a connection that reads its own way (fakeredis's)
    module = sys.modules.get(type(parser).__module__)
    none = getattr(module, "NOT_ENOUGH_DATA", None)
    broken = getattr(module, "ConnectionError", None)
    reader = getattr(parser, "_reader", None)
    if none is None or reader is None:
        return None
    if not (isinstance(broken, type) and issubclass(broken, BaseException)):
        return None
    if getattr(parser, "_stream", None) is None:
        return None
    if getattr(parser, "_next_response", none) is not none:
        return None
    push = getattr(parser, "_hiredis_PushNotificationType", None)
    if push is None and str(getattr(conn, "protocol", 2)) not in ("2", "None"):
        return None  # RESP3 with a hiredis that cannot mark push messages
    return DirectReplies(parser, none, push, broken)


class _ReplyProtocol(asyncio.Protocol):
    """The protocol of a connection whose replies are parsed as the bytes arrive (see
    :func:`read_in_callback`); everything but the bytes still reaches the library's own
    protocol, so that its stream sees the end of the connection and ``disconnect()`` (which
    waits for the close) works as before."""

    def __init__(
        self,
        replies: DirectReplies,
        original: Any,
        *,
        on_reply: Callable[[Any], None],
        on_lost: Callable[[BaseException], None],
        spawn: Callable[[Any], None],
        push_replies: frozenset[bytes],
    ) -> None:
        self._replies = replies
        self._original = original
        self._on_reply = on_reply
        self._on_lost = on_lost
        self._spawn = spawn
        self._push_replies = push_replies
        self._lost = False

    def data_received(self, data: bytes) -> None:
        if self._lost:
            return
        replies = self._replies
        replies.feed(data)
        none, on_reply = replies._none, self._on_reply
        try:
            while True:
                reply = replies.parsed()
                if reply is none:
                    return
                if replies.is_push(reply) and not self._is_reply(reply):
                    assert replies._handle_push is not None
                    self._spawn(_handle_push(replies._handle_push, reply))  # not a reply
                    continue
                on_reply(reply)
        except Exception as error:  # out of step, or a reply nobody asked for
            self._lose(error)

    def _is_reply(self, message: Any) -> bool:
        """Whether a RESP3 push message is a reply to this connection's user (its kind is
        in ``push_replies``)."""
        return bool(message) and message[0] in self._push_replies

    def eof_received(self) -> bool | None:
        keep: bool | None = self._original.eof_received()
        self._lose(ConnectionError("the server closed the connection"))
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        self._original.connection_lost(exc)
        if exc is None:
            self._lose(ConnectionError("the connection closed"))
        else:
            error = ConnectionError(f"error while reading: {exc!r}")
            error.__cause__ = exc
            self._lose(error)

    def pause_writing(self) -> None:
        self._original.pause_writing()

    def resume_writing(self) -> None:
        self._original.resume_writing()

    def _lose(self, error: BaseException) -> None:
        if not self._lost:
            self._lost = True
            self._on_lost(error)


async def _handle_push(handler: Callable[[Any], Any], message: Any) -> None:
    """Run the library's handler of a RESP3 push message that is not a reply (a
    notification), logging a failure: it runs on its own, after the replies around it."""
    try:
        await handler(message)
    except Exception:
        log.exception("the client library's handler of a push message failed")


def read_in_callback(
    conn: Any,
    on_reply: Callable[[Any], None],
    on_lost: Callable[[BaseException], None],
    spawn: Callable[[Any], None],
    push_replies: frozenset[bytes] = frozenset(),
) -> bool:
    """Have a connected asyncio connection's replies parsed by the event loop's own callback
    as the bytes arrive, each handed to ``on_reply`` (an error reply as its exception value),
    and ``on_lost(error)`` called once when the connection ends or its stream is out of step
    (then nothing more is handed over, and an exception ``on_reply`` raises counts as
    that); a RESP3 push message goes to the library's push handler, run by
    ``spawn(coroutine)``, but for the kinds in ``push_replies`` (``b"message"``...: a
    subscriber's), which go to ``on_reply``. A reader task would cost one more turn of the
    event loop per read: the loop wakes the task, the task parses and wakes the caller
    (docs/design.md). Where the connection reads with redis-py's hiredis parser in a form
    :func:`direct_replies` knows and nothing is left unread: ``True``; else ``False``
    (nothing changed; read with a task). The connection must be read no other way
    afterwards."""
    replies = direct_replies(conn)
    if replies is None:
        return False
    has_data = getattr(conn._parser._reader, "has_data", None)
    if has_data is None or has_data():  # bytes the reader holds would wait for the next
        return False
    writer = getattr(conn, "_writer", None)
    transport = getattr(writer, "transport", None)
    stream = getattr(conn, "_reader", None)
    unread: Any = getattr(stream, "_buffer", b"?")
    if transport is None or stream is None or unread:
        return False
    get_protocol = getattr(transport, "get_protocol", None)
    set_protocol = getattr(transport, "set_protocol", None)
    if get_protocol is None or set_protocol is None or transport.is_closing():
        return False
    protocol = _ReplyProtocol(
        replies,
        get_protocol(),
        on_reply=on_reply,
        on_lost=on_lost,
        spawn=spawn,
        push_replies=push_replies,
    )
    set_protocol(protocol)
    return True


def at_eof(conn: Any) -> bool:
    """Whether an asyncio connection's stream has seen the server close it (no syscall)."""
    stream = getattr(conn, "_reader", None)
    return stream is not None and bool(stream.at_eof())


async def astale(conn: Any) -> bool:
    """Whether a connection taken from a pool must be reconnected before use: closed by the
    server (a restart), or holding bytes nobody read. The caller drops it when true."""
    if not conn.is_connected:
        return True
    # The stream already knows of an end (the server closed it) or of unread bytes; the
    # pure-Python parsers' can_read_destructive before redis-py 8 reported neither.
    stream = getattr(conn, "_reader", None)
    if stream is not None and (stream.at_eof() or getattr(stream, "_buffer", None)):
        return True
    try:
        if _has_can_read(conn):
            return bool(await conn.can_read())
        # redis-py < 8, valkey-py: may consume a byte; the caller then drops it
        return bool(await conn.can_read_destructive())
    except Exception:  # closed: reconnect
        return True


# -- cluster slot maps -------------------------------------------------------------------------


def move_slot(nodes_manager: Any, error: Exception) -> None:
    """Correct a blocking cluster's slot map after a ``MOVED`` reply.

    redis-py 7.4+ has ``NodesManager.move_slot``; before (and valkey-py) the error is handed
    to ``update_moved_exception`` and the map is corrected at the next slot lookup, which
    is what redis-py's own ``execute_command`` does there.
    """
    if hasattr(nodes_manager, "move_slot"):
        nodes_manager.move_slot(error)
    else:
        nodes_manager.update_moved_exception(error)


async def amove_slot(nodes_manager: Any, error: Exception) -> None:
    """The asyncio twin of :func:`move_slot` (before redis-py 7.4 the asyncio cluster sets
    ``_moved_exception`` itself, as here; 7.4's ``move_slot`` is not a coroutine, 8's is)."""
    move = getattr(nodes_manager, "move_slot", None)
    if move is None:
        nodes_manager._moved_exception = error
        return
    done = move(error)  # a coroutine in redis-py 8, a plain call in 7.4
    if inspect.isawaitable(done):
        await done


def node_pool(cluster: Any, node: Any) -> Any:
    """The connection pool of one node of a blocking cluster client (redis-py's
    ``get_redis_connection``, valkey-py's ``get_valkey_connection``)."""
    get = getattr(cluster, "get_redis_connection", None) or cluster.get_valkey_connection
    return get(node).connection_pool


# -- the client libraries ---------------------------------------------------------------------


class _Errors:
    """Exception families of every client library in use (redis-py; valkey-py once
    :func:`use_valkey` ran). Each attribute is a tuple for ``except`` and ``isinstance``."""

    def __init__(self) -> None:
        self.base: tuple[type[Exception], ...] = ()
        self.failures: tuple[type[Exception], ...] = (OSError,)  # base, OSError
        self.response: tuple[type[Exception], ...] = ()
        self.no_script: tuple[type[Exception], ...] = ()
        self.no_permission: tuple[type[Exception], ...] = ()
        self.read_only: tuple[type[Exception], ...] = ()
        self.authentication: tuple[type[Exception], ...] = ()
        self.timeout: tuple[type[Exception], ...] = ()
        self.connection: tuple[type[Exception], ...] = ()
        self.max_connections: tuple[type[Exception], ...] = ()
        self.ask: tuple[type[Exception], ...] = ()  # MovedError is a subclass
        self.moved: tuple[type[Exception], ...] = ()
        self.try_again: tuple[type[Exception], ...] = ()
        self.cluster_down: tuple[type[Exception], ...] = ()
        self.cluster: tuple[type[Exception], ...] = ()  # RedisClusterException
        self.master_not_found: tuple[type[Exception], ...] = ()
        self._added: set[str] = set()

    def add(self, library: ModuleType, base: str, cluster: str) -> None:
        """Add a library's classes (``base``: its root error's name, ``cluster``: its
        cluster exception's name)."""
        if library.__name__ in self._added:
            return
        exceptions = sys.modules[f"{library.__name__}.exceptions"]
        sentinel = sys.modules[f"{library.__name__}.sentinel"]

        def one(name: str) -> tuple[type[Exception], ...]:
            cls = getattr(exceptions, name, None)
            return (cls,) if isinstance(cls, type) else ()

        self.base += one(base)
        self.failures += one(base)
        self.response += one("ResponseError")
        self.no_script += one("NoScriptError")
        self.no_permission += one("NoPermissionError")
        self.read_only += one("ReadOnlyError")
        self.authentication += one("AuthenticationError") + one(
            "AuthenticationWrongNumberOfArgsError"
        )
        self.timeout += one("TimeoutError")
        self.connection += one("ConnectionError")
        self.max_connections += one("MaxConnectionsError")  # redis-py >= 6 (5: ConnectionError)
        self.ask += one("AskError")
        self.moved += one("MovedError")
        self.try_again += one("TryAgainError")
        self.cluster_down += one("ClusterDownError")
        self.cluster += one(cluster)
        not_found = getattr(sentinel, "MasterNotFoundError", None)
        if isinstance(not_found, type):
            self.master_not_found += (not_found,)
        self._added.add(library.__name__)


class _Pools:
    """Pool classes of every client library in use, for the transports' choices."""

    def __init__(self) -> None:
        self.plain: set[type] = set()  # ConnectionPool itself (no subclass): kept connections
        self._added: set[str] = set()

    def add(self, library: ModuleType) -> None:
        if library.__name__ in self._added:
            return
        asyncio_face = sys.modules[f"{library.__name__}.asyncio"]
        for face in (library, asyncio_face):
            self.plain.add(face.ConnectionPool)
        self._added.add(library.__name__)


ERRORS = _Errors()
ERRORS.add(redis, "RedisError", "RedisClusterException")
POOLS = _Pools()
POOLS.add(redis)


def is_plain_pool(pool: object) -> bool:
    """Whether ``pool`` is a library's ``ConnectionPool`` itself (not a subclass such as a
    Sentinel or blocking pool): a transport may keep a few of its connections checked out."""
    return type(pool) in POOLS.plain


def pool_share(pool: object, most: int) -> int:
    """How many of ``pool``'s connections syncprims may hold at once (``Config.pool_share``):
    ``most``, and never more than a quarter of the pool's ``max_connections``, at least one,
    so that the application's own commands always find most of its pool free."""
    size = getattr(pool, "max_connections", None)
    if isinstance(size, int) and size > 0:
        return max(1, min(most, size // 4))
    return max(1, most)


def use_valkey() -> ModuleType:
    """Import valkey-py and let :data:`ERRORS` catch its exceptions too.

    Returns:
        The ``valkey`` module.

    Raises:
        ImportError: valkey-py is not installed (``pip install 'syncprims[valkey]'``).
    """
    try:
        for module in ("valkey.exceptions", "valkey.sentinel", "valkey.asyncio"):
            importlib.import_module(module)
        valkey = importlib.import_module("valkey")
    except ImportError as error:
        raise ImportError(
            "a valkey:// URL or valkey-py client needs valkey-py: pip install 'syncprims[valkey]'"
        ) from error
    ERRORS.add(valkey, "ValkeyError", "ValkeyClusterException")
    POOLS.add(valkey)
    return valkey


def valkey_if_imported() -> ModuleType | None:
    """valkey-py, set up by :func:`use_valkey`, when the application has imported it (a
    valkey-py object can exist only then); ``None`` otherwise. Never imports it."""
    if sys.modules.get("valkey") is None:  # not imported (or import blocked)
        return None
    return use_valkey()
