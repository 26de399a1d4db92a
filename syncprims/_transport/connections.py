"""Connection settings from a :class:`~syncprims.Config`, and redis-py error translation.

This is the one boundary where redis-py's exceptions become syncprims errors.
redis-py parses the URL (``ConnectionPool.from_url``); we only choose the connection class
and the keyword arguments. Transport-level retries are disabled: the executor decides what
may be retried (an acquire script that may have run is never re-sent).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.exceptions
import redis.retry
from redis.backoff import NoBackoff

from syncprims.config import Config
from syncprims.errors import (
    RedisConnectionError,
    RedisTimeoutError,
    ServerReplyError,
    SyncPrimsError,
)

__all__ = ["ConnectionSpec", "async_spec", "pack", "sync_spec", "translate"]

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
    in a per-argument Python check.
    """
    if _hiredis_pack is not None:
        return [_hiredis_pack(command)]  # a list: both faces' send_packed_command iterate it
    return conn.pack_command(*command)


class ConnectionSpec:
    """A connection class and the keyword arguments that build one connection."""

    __slots__ = ("address", "connection_class", "kwargs")

    def __init__(self, connection_class: Any, kwargs: dict[str, Any], address: str) -> None:
        self.connection_class = connection_class
        self.kwargs = kwargs
        self.address = address

    def make(self) -> Any:
        """A new, not yet connected, redis-py connection."""
        return self.connection_class(**self.kwargs)


def _options(config: Config, *, socket_timeout: float | None) -> dict[str, Any]:
    server = config.server
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": config.connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": 0,
        "client_name": config.client_name,
        "protocol": 2,
    }
    if server.username is not None:
        options["username"] = server.username
    if server.password is not None:
        options["password"] = server.password
    if server.db is not None:
        options["db"] = server.db
    if server.url.startswith("rediss://"):
        tls = server.tls
        options.update(
            ssl_ca_certs=tls.ca_certs,
            ssl_certfile=tls.certfile,
            ssl_keyfile=tls.keyfile,
            ssl_cert_reqs=ssl.CERT_REQUIRED if tls.verify else ssl.CERT_NONE,
            ssl_check_hostname=tls.check_hostname and tls.verify,
        )
    return options


def sync_spec(config: Config) -> ConnectionSpec:
    """How to build a blocking redis-py connection: the socket timeout is ``config.timeout``."""
    pool = redis.ConnectionPool.from_url(
        config.server.url,
        retry=redis.retry.Retry(NoBackoff(), 0),
        **_options(config, socket_timeout=config.timeout),
    )
    return ConnectionSpec(pool.connection_class, dict(pool.connection_kwargs), config.describe())


def async_spec(config: Config) -> ConnectionSpec:
    """How to build a ``redis.asyncio`` connection.

    The socket timeout is left unset (redis-py would run every write through
    ``asyncio.wait_for``); the executor puts one deadline around each whole call instead.
    """
    pool = redis.asyncio.ConnectionPool.from_url(
        config.server.url,
        retry=redis.asyncio.retry.Retry(NoBackoff(), 0),
        **_options(config, socket_timeout=None),
    )
    return ConnectionSpec(pool.connection_class, dict(pool.connection_kwargs), config.describe())


def translate(
    error: BaseException, *, context: str, address: str, timeout: float, sent: bool
) -> SyncPrimsError:
    """Turn a redis-py (or socket) error into the matching syncprims error.

    Args:
        error: what redis-py raised.
        context: what was being done, e.g. ``"acquiring lock 'x'"``.
        address: the server, for the message (no password).
        timeout: the reply timeout in force, seconds.
        sent: whether the command may have reached the server.

    Returns:
        The error to raise (``raise translated from error``).
    """
    if isinstance(error, (redis.exceptions.TimeoutError, TimeoutError)):
        return RedisTimeoutError(
            f"Redis at {address} did not reply within {timeout:g} s while {context}",
            maybe_executed=sent,
        )
    if isinstance(error, (redis.exceptions.ConnectionError, ConnectionError, OSError)):
        return RedisConnectionError(
            f"connection to Redis at {address} failed while {context}: {error}",
            maybe_executed=sent,
        )
    if isinstance(error, redis.exceptions.ResponseError):
        return ServerReplyError(f"Redis at {address} refused {context}: {error}")
    return SyncPrimsError(f"Redis client error while {context}: {error!r}")
