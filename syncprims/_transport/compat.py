"""The version shim: the one place syncprims touches a client library's connection internals.

syncprims drives the connections of the application's own client directly (one attempt per
command, replies as bytes, its own deadlines: ``docs/design.md``, "One attempt per command").
Those internals differ between the client libraries and versions it accepts, redis-py 5.0.1
to 8.x and valkey-py 6.x (a redis-py fork); everything else in the transport speaks only
this module's version-neutral interface. Where a library lacks something, a function takes
a fallback, chosen once per connection (or pool) class from its method's signature, never
from a version number; the fallbacks, the tests that take each on every redis-py
(``tests/test_compat.py``) and the matrix cells that take them for real:
``docs/compatibility.md``, "Where the versions differ".
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import redis
import redis.asyncio
import redis.exceptions

__all__ = [
    "ERRORS",
    "PoolExhaustedError",
    "adrop",
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
    "still_owned",
    "node_pool",
    "read",
    "read_message",
    "readable",
    "take",
    "use_valkey",
    "valkey_if_imported",
    "write_now",
]

_COMMAND_NAME = "EVALSHA"  # what an old get_connection() is told (it does not use it)


def _parameters(function: Any) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(function).parameters
    except (TypeError, ValueError):  # pragma: no cover - a C function: assume the old API
        return {}


def _accepts(function: Any, name: str) -> bool:
    """Whether ``function`` takes the keyword argument ``name`` (or any keyword)."""
    parameters = _parameters(function)
    if name in parameters:
        return parameters[name].kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _needs_command_name(function: Any) -> bool:
    """Whether ``get_connection`` has a required ``command_name`` (redis-py < 5.3)."""
    parameter = _parameters(function).get("command_name")
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
    """A connection from a blocking pool (``pool.get_connection()``, given a command name
    only where its signature requires one: redis-py < 5.3, valkey-py 6).

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
    ``timeout`` seconds (``None``: the connection's own socket timeout). Before redis-py 8
    (and in valkey-py) ``read_response`` takes no timeout: the socket's is set around the
    read and restored after it, as redis-py 8 does inside its parser.

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
    """Read one pub/sub reply (a message, a confirmation) as bytes, after :func:`readable`;
    one that ``can_read()`` pre-read decoded (before redis-py 8, and in valkey-py, with
    ``decode_responses=True``) is encoded again, as UTF-8 (every name syncprims publishes on
    is)."""
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


async def adrop(conn: Any) -> None:
    """Close an asyncio connection at once, not waiting for its socket (a failure: it was
    already broken)."""
    with contextlib.suppress(Exception):
        await conn.disconnect(nowait=True)


async def aread(conn: Any, *, push_request: bool = True) -> Any:
    """Read one reply as bytes, with no deadline of the library's own (the caller bounds
    the call: ``timeout=math.inf`` is no timer to redis-py 8, an unbounded one to older
    versions); an error reply does not disconnect. ``push_request=False``: a RESP3 push
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
    encoder = getattr(conn, "encoder", None)
    if encoder is not None and encoder.decode_responses:  # redis-py 5.0's hiredis decodes anyway
        return _as_bytes(reply, encoder.encoding, encoder.encoding_errors)
    return reply


def _as_bytes(reply: Any, encoding: str, errors: str) -> Any:
    """``reply`` with any text in it encoded again, as ``encoding`` had decoded it."""
    if isinstance(reply, str):
        return reply.encode(encoding, errors)
    if isinstance(reply, list):
        return [_as_bytes(part, encoding, errors) for part in reply]
    if isinstance(reply, dict):  # a RESP3 map
        return {
            _as_bytes(key, encoding, errors): _as_bytes(value, encoding, errors)
            for key, value in reply.items()
        }
    if isinstance(reply, set):  # a RESP3 set
        return {_as_bytes(part, encoding, errors) for part in reply}
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
        self.failures: tuple[type[Exception], ...] = (OSError,)  # the root errors, OSError
        self.response: tuple[type[Exception], ...] = ()
        self.no_script: tuple[type[Exception], ...] = ()
        self.no_permission: tuple[type[Exception], ...] = ()
        self.read_only: tuple[type[Exception], ...] = ()
        self.authentication: tuple[type[Exception], ...] = ()
        self.invalid_response: tuple[type[Exception], ...] = ()  # not the Redis protocol
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

        def one(name: str, module: ModuleType = exceptions) -> tuple[type[Exception], ...]:
            cls = getattr(module, name, None)
            return (cls,) if isinstance(cls, type) else ()

        self.failures += one(base)
        self.response += one("ResponseError")
        self.no_script += one("NoScriptError")
        self.no_permission += one("NoPermissionError")
        self.read_only += one("ReadOnlyError")
        self.authentication += one("AuthenticationError") + one(
            "AuthenticationWrongNumberOfArgsError"
        )
        self.invalid_response += one("InvalidResponse")
        self.timeout += one("TimeoutError")
        self.connection += one("ConnectionError")
        self.max_connections += one("MaxConnectionsError")  # redis-py >= 6 (5: ConnectionError)
        self.ask += one("AskError")
        self.moved += one("MovedError")
        self.try_again += one("TryAgainError")
        self.cluster_down += one("ClusterDownError")
        self.cluster += one(cluster)
        self.master_not_found += one("MasterNotFoundError", sentinel)
        self._added.add(library.__name__)


ERRORS = _Errors()
ERRORS.add(redis, "RedisError", "RedisClusterException")
_PLAIN_POOLS: set[type] = {redis.ConnectionPool, redis.asyncio.ConnectionPool}  # + valkey's


def is_plain_pool(pool: object) -> bool:
    """Whether ``pool`` is a library's ``ConnectionPool`` itself (not a subclass such as a
    Sentinel or blocking pool): a transport may keep a few of its connections checked out."""
    return type(pool) in _PLAIN_POOLS


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
    _PLAIN_POOLS.update((valkey.ConnectionPool, valkey.asyncio.ConnectionPool))
    return valkey


def valkey_if_imported() -> ModuleType | None:
    """valkey-py, set up by :func:`use_valkey`, when the application has imported it (a
    valkey-py object can exist only then); ``None`` otherwise. Never imports it."""
    if sys.modules.get("valkey") is None:  # not imported (or import blocked)
        return None
    return use_valkey()
