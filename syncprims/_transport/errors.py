"""The one boundary where redis-py's exceptions become syncprims errors, and command packing.

Every call the transport makes on a redis-py connection goes through :func:`translate` when
it fails, with whether the command may have reached the server (``sent``): the core decides
from ``TransportError.maybe_executed`` whether an operation may be retried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.crc

from syncprims._protocol.wire import Wired
from syncprims._transport.connections import ERRORS
from syncprims.errors import (
    AuthenticationError,
    RedisConnectionError,
    RedisTimeoutError,
    ServerReplyError,
    SyncPrimsError,
    TransportError,
)

__all__ = ["ClusterRedirectError", "error_code", "key_slot", "pack", "redirection", "translate"]

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency, but stay usable without it
    _hiredis_pack = None


def pack(conn: Any, command: tuple[Any, ...]) -> Any:
    """Encode a command for ``send_packed_command``.

    With hiredis (a dependency) this is its C encoder, called directly: ``redis.asyncio``
    connections otherwise pack in pure Python (a quarter of an uncontended acquire+release
    in the asyncio face, measured here), and the blocking connections wrap the same encoder
    in a per-argument Python check. Text is encoded as UTF-8 whatever the client's
    ``encoding`` (Redisson's ``StringCodec``), so names and owner fields are the same bytes
    for every client. A command encoded already (``_protocol.wire``) is sent as it is.
    """
    if type(command) is Wired:
        return command.wire
    if _hiredis_pack is not None:
        return [_hiredis_pack(command)]  # a list: both faces' send_packed_command iterate it
    return conn.pack_command(*command)


def key_slot(key: str) -> int:
    """The cluster slot of ``key`` (CRC16 of its hash tag; redis-py's implementation)."""
    return int(redis.crc.key_slot(key.encode("utf-8")))


class ClusterRedirectError(TransportError):
    """A cluster redirection: MOVED, ASK, TRYAGAIN or CLUSTERDOWN. The command did not run.

    Attributes:
        kind: ``"moved"``, ``"ask"``, ``"tryagain"`` or ``"down"``.
        slot: the slot (moved/ask), else ``None``.
        node: ``(host, port)`` to go to (moved/ask), else ``None``.
        cause: the client library's exception (``MovedError`` and ``AskError`` feed its slot
            map).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        slot: int | None,
        node: tuple[str, int] | None,
        cause: Exception,
    ) -> None:
        super().__init__(message, maybe_executed=False)
        self.kind = kind
        self.slot = slot
        self.node = node
        self.cause = cause


def redirection(error: BaseException, context: str) -> ClusterRedirectError | None:
    """The :class:`ClusterRedirectError` a redis-py (or valkey-py) error stands for, if it is
    one."""
    if isinstance(error, ERRORS.ask):  # MovedError is a subclass
        kind = "moved" if isinstance(error, ERRORS.moved) else "ask"
        slot, address = getattr(error, "slot_id", 0), getattr(error, "node_addr", "?")
        return ClusterRedirectError(
            f"{kind} while {context}: slot {slot} is at {address}",
            kind=kind,
            slot=int(slot),
            node=(str(getattr(error, "host", "")), int(getattr(error, "port", 0))),
            cause=error,
        )
    if isinstance(error, ERRORS.try_again):
        return ClusterRedirectError(
            f"TRYAGAIN while {context}", kind="tryagain", slot=None, node=None, cause=error
        )
    if isinstance(error, ERRORS.cluster_down):
        return ClusterRedirectError(
            f"CLUSTERDOWN while {context}", kind="down", slot=None, node=None, cause=error
        )
    return None


def error_code(error: BaseException) -> str:
    """Redis's error code of a client library's error reply: the class's (redis-py drops
    the code of the replies it maps to a class: ``NOPERM``, ``NOSCRIPT``, ``READONLY``,
    ...), else the message's first word when it is one (upper case)."""
    for code, kinds in (
        ("NOPERM", ERRORS.no_permission),
        ("NOSCRIPT", ERRORS.no_script),
        ("READONLY", ERRORS.read_only),
    ):
        if isinstance(error, kinds):
            return code
    first = str(error).split(" ", 1)[0]
    return first if first.isupper() and first.replace("_", "").isalpha() else ""


def translate(
    error: BaseException, *, context: str, address: str, timeout: float, sent: bool
) -> SyncPrimsError:
    """Turn a redis-py, valkey-py (once in use) or socket error into the matching syncprims
    error.

    Args:
        error: what redis-py raised.
        context: what was being done, e.g. ``"acquiring lock 'x'"``.
        address: the server, for the message (no password).
        timeout: the reply timeout in force, seconds.
        sent: whether the command may have reached the server.

    Returns:
        The error to raise (``raise translated from error``); a syncprims error unchanged.
    """
    if isinstance(error, SyncPrimsError):  # ours are redis-py errors too: never wrap twice
        return error
    redirect = redirection(error, context)
    if redirect is not None:
        return redirect
    if isinstance(error, ERRORS.read_only) or "previous master is now a slave" in str(error):
        # A failover demoted this server: the command did not run; the next connection
        # finds the new master.
        return RedisConnectionError(
            f"Redis at {address} is no longer the master while {context}: {error}",
            maybe_executed=False,
        )
    if isinstance(error, ERRORS.authentication):
        return AuthenticationError(
            f"Redis at {address} refused the credentials while {context}: {error} (check the "
            "user name and password, and that the user is enabled)",
            code=error_code(error) or "WRONGPASS",
        )
    if isinstance(error, (*ERRORS.timeout, TimeoutError)):
        return RedisTimeoutError(
            f"Redis at {address} did not reply within {timeout:g} s while {context}",
            maybe_executed=sent,
        )
    if isinstance(error, ERRORS.max_connections):  # redis-py >= 6 (5: a ConnectionError)
        return RedisConnectionError(
            f"the connection pool of Redis at {address} has no free connection while "
            f"{context} ({error})",
            maybe_executed=False,
        )
    if isinstance(error, (*ERRORS.connection, ConnectionError, OSError)):
        return RedisConnectionError(
            f"connection to Redis at {address} failed while {context}: {error}",
            maybe_executed=sent,
        )
    if isinstance(error, ERRORS.response):
        code = error_code(error)
        shown = f"{code} {error}" if code and not str(error).startswith(code) else str(error)
        return ServerReplyError(f"Redis at {address} refused {context}: {shown}", code=code)
    return SyncPrimsError(f"Redis client error while {context}: {error!r}")
