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
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.crc
import redis.exceptions
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff

from syncprims.config import TLS, ClusterServers, Config, SentinelServers, parse_url, redact
from syncprims.errors import (
    AuthenticationError,
    RedisConnectionError,
    RedisTimeoutError,
    ServerReplyError,
    SyncPrimsError,
    TransportError,
)

__all__ = [
    "ConnectionSpec",
    "ClusterRedirectError",
    "async_spec",
    "key_slot",
    "node_spec",
    "pack",
    "plain_client",
    "redirection",
    "sync_spec",
    "translate",
    "url_spec",
]

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
    """How to make a connection to one server (or to whichever node is the master).

    ``sentinel`` is the redis-py ``Sentinel`` that finds the master, if any: it keeps its own
    clients to the sentinels, closed by :meth:`close` / :meth:`aclose`.
    """

    __slots__ = ("address", "make", "sentinel")

    def __init__(self, make: Callable[[], Any], address: str, sentinel: Any = None) -> None:
        self.make = make
        """A new, not yet connected, redis-py connection."""
        self.address = address
        self.sentinel = sentinel

    def close(self) -> None:
        """Close what the spec holds (blocking sentinel clients)."""
        if self.sentinel is not None:
            for client in self.sentinel.sentinels:
                client.close()

    async def aclose(self) -> None:
        """Close what the spec holds (asyncio sentinel clients)."""
        if self.sentinel is not None:
            for client in self.sentinel.sentinels:
                await client.aclose()


def _credentials(config: Config) -> tuple[str | None, str | None, TLS]:
    server = config.server
    return server.username, server.password, server.tls


def _options(config: Config, *, socket_timeout: float | None, tls_url: bool) -> dict[str, Any]:
    username, password, tls = _credentials(config)
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": config.connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": 0,
        "client_name": config.client_name,
        "protocol": 2,
    }
    if username is not None:
        options["username"] = username
    if password is not None:
        options["password"] = password
    db = getattr(config.server, "db", None)
    if db is not None:
        options["db"] = db
    if tls_url:
        options.update(
            ssl_ca_certs=tls.ca_certs,
            ssl_certfile=tls.certfile,
            ssl_keyfile=tls.keyfile,
            ssl_cert_reqs=ssl.CERT_REQUIRED if tls.verify else ssl.CERT_NONE,
            ssl_check_hostname=tls.check_hostname and tls.verify,
        )
    return options


def url_spec(config: Config, url: str, *, asyncio: bool) -> ConnectionSpec:
    """Connections to the server at ``url``, with the configuration's credentials and timeouts.

    The blocking connections read with the socket timeout ``config.timeout``; the asyncio
    ones have none (redis-py would run every write through ``asyncio.wait_for``): the
    executor puts one deadline around each whole call instead.
    """
    module: Any = redis.asyncio if asyncio else redis
    retry = (
        redis.asyncio.retry.Retry(NoBackoff(), 0) if asyncio else redis.retry.Retry(NoBackoff(), 0)
    )
    pool = module.ConnectionPool.from_url(
        url,
        retry=retry,
        **_options(
            config,
            socket_timeout=None if asyncio else config.timeout,
            tls_url=url.startswith("rediss://"),
        ),
    )
    kwargs = dict(pool.connection_kwargs)
    cls = pool.connection_class
    return ConnectionSpec(lambda: cls(**kwargs), redact(url))


def _sentinel_spec(config: Config, servers: SentinelServers, *, asyncio: bool) -> ConnectionSpec:
    hosts = [
        (urlsplit(u).hostname or "127.0.0.1", urlsplit(u).port or 26379) for u in servers.sentinels
    ]
    sentinel_kwargs: dict[str, Any] = {"socket_timeout": config.timeout}
    if servers.sentinel_password is not None:
        sentinel_kwargs["password"] = servers.sentinel_password
    tls_url = servers.sentinels[0].startswith("rediss://")
    options = _options(config, socket_timeout=None if asyncio else config.timeout, tls_url=tls_url)
    # redis-py leaves its sentinel classes unannotated; a stub in typings/ would have to
    # shadow all of redis-py, so the four calls below are excused one by one.
    if asyncio:
        manager: Any = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            hosts, sentinel_kwargs=sentinel_kwargs, **options
        )
        pool: Any = redis.asyncio.sentinel.SentinelConnectionPool(  # type: ignore[no-untyped-call]
            servers.master_name,
            manager,
            retry=redis.asyncio.retry.Retry(NoBackoff(), 0),
            **options,
        )
    else:
        manager = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            hosts, sentinel_kwargs=sentinel_kwargs, **options
        )
        pool = redis.sentinel.SentinelConnectionPool(  # type: ignore[no-untyped-call]
            servers.master_name, manager, retry=redis.retry.Retry(NoBackoff(), 0), **options
        )
    return ConnectionSpec(pool.make_connection, servers.redacted_url(), sentinel=manager)


def sync_spec(config: Config) -> ConnectionSpec:
    """Blocking connections to the (single or sentinel-managed) server."""
    return _spec(config, asyncio=False)


def async_spec(config: Config) -> ConnectionSpec:
    """``redis.asyncio`` connections to the (single or sentinel-managed) server."""
    return _spec(config, asyncio=True)


def _spec(config: Config, *, asyncio: bool) -> ConnectionSpec:
    server = config.server
    if isinstance(server, SentinelServers):
        return _sentinel_spec(config, server, asyncio=asyncio)
    if isinstance(server, ClusterServers):
        raise TypeError("a cluster has one connection spec per node (see node_spec)")
    return url_spec(config, server.url, asyncio=asyncio)


def node_spec(config: Config, host: str, port: int, *, asyncio: bool) -> ConnectionSpec:
    """Connections to one cluster node (credentials and TLS of the cluster's seeds)."""
    server = config.server
    assert isinstance(server, ClusterServers)
    scheme = "rediss" if server.nodes[0].startswith("rediss://") else "redis"
    return url_spec(config, f"{scheme}://{host}:{port}", asyncio=asyncio)


def key_slot(key: str) -> int:
    """The cluster slot of ``key`` (CRC16 of its hash tag; redis-py's implementation)."""
    return int(redis.crc.key_slot(key.encode("utf-8")))


class ClusterRedirectError(TransportError):
    """A cluster redirection: MOVED, ASK, TRYAGAIN or CLUSTERDOWN. The command did not run.

    Attributes:
        kind: ``"moved"``, ``"ask"``, ``"tryagain"`` or ``"down"``.
        slot: the slot (moved/ask), else ``None``.
        node: ``(host, port)`` to go to (moved/ask), else ``None``.
    """

    def __init__(
        self, message: str, *, kind: str, slot: int | None, node: tuple[str, int] | None
    ) -> None:
        super().__init__(message, maybe_executed=False)
        self.kind = kind
        self.slot = slot
        self.node = node


def redirection(error: BaseException, context: str) -> ClusterRedirectError | None:
    """The :class:`ClusterRedirectError` a redis-py error stands for, if it is one."""
    if isinstance(error, redis.exceptions.AskError):  # MovedError is a subclass
        kind = "moved" if isinstance(error, redis.exceptions.MovedError) else "ask"
        return ClusterRedirectError(
            f"{kind} while {context}: slot {error.slot_id} is at {error.node_addr}",
            kind=kind,
            slot=int(error.slot_id),
            node=(error.host, int(error.port)),
        )
    if isinstance(error, redis.exceptions.TryAgainError):
        return ClusterRedirectError(
            f"TRYAGAIN while {context}", kind="tryagain", slot=None, node=None
        )
    if isinstance(error, redis.exceptions.ClusterDownError):
        return ClusterRedirectError(
            f"CLUSTERDOWN while {context}", kind="down", slot=None, node=None
        )
    return None


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
    redirect = redirection(error, context)
    if redirect is not None:
        return redirect
    if isinstance(error, redis.exceptions.ReadOnlyError) or "previous master is now a slave" in str(
        error
    ):
        # A failover demoted this server: the command did not run; the next connection
        # finds the new master.
        return RedisConnectionError(
            f"Redis at {address} is no longer the master while {context}: {error}",
            maybe_executed=False,
        )
    refused = (
        redis.exceptions.AuthenticationError,
        redis.exceptions.AuthenticationWrongNumberOfArgsError,
    )
    if isinstance(error, refused):
        return AuthenticationError(
            f"Redis at {address} refused the credentials while {context}: {error} (check the "
            "user name and password, and that the user is enabled)"
        )
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
        code = "NOPERM " if isinstance(error, redis.exceptions.NoPermissionError) else ""
        return ServerReplyError(f"Redis at {address} refused {context}: {code}{error}")
    return SyncPrimsError(f"Redis client error while {context}: {error!r}")


def plain_client(url: str) -> Any:
    """A plain redis-py client for any URL form syncprims accepts (for tools and tests).

    ``redis+cluster://`` gives a ``RedisCluster``; ``redis+sentinel://`` the master's client
    from a ``Sentinel``; anything else ``Redis.from_url``.
    """
    servers = parse_url(url)
    if isinstance(servers, ClusterServers):
        first = urlsplit(servers.nodes[0])
        return redis.RedisCluster(host=first.hostname or "127.0.0.1", port=first.port or 6379)
    if isinstance(servers, SentinelServers):
        hosts = [(urlsplit(u).hostname, urlsplit(u).port) for u in servers.sentinels]
        sentinel = redis.sentinel.Sentinel(hosts)  # type: ignore[no-untyped-call]
        return sentinel.master_for(servers.master_name, password=servers.password)  # type: ignore[no-untyped-call]
    return redis.Redis.from_url(url)
