"""What a client is built on: a redis-py object the caller passes in, or one made from a URL.

``sync_source`` / ``async_source`` accept the objects an application already has
(``redis.Redis`` incl. ``fakeredis.FakeRedis`` and a Sentinel ``master_for`` client, a
``ConnectionPool`` of any kind, a ``RedisCluster``; or their ``redis.asyncio`` twins; and the
same objects of valkey-py, ``valkey.Valkey``, ``valkey.ConnectionPool``,
``valkey.ValkeyCluster`` and their ``valkey.asyncio`` twins) and return the pool (or
cluster) syncprims takes its connections from. A pool with a client-side cache is the one
exception: syncprims takes its connections from a cache-free twin of it
(:mod:`syncprims._transport.caching`). Nothing about the
connection (credentials, TLS, database, client name, socket timeouts, pool size) is set by
syncprims then: those are the caller's settings, and the caller keeps ownership (shutting a
syncprims client down leaves the redis-py object open).

A URL makes a client that syncprims owns (and closes at shutdown): the forms
:func:`redis_from_url` reads (the user and password of a ``redis+sentinel://`` URL are the
master's), and their ``valkey://``, ``valkeys://``, ``valkey+cluster://`` and
``valkey+sentinel://`` twins (and ``valkeys+`` forms) made of valkey-py, when it is installed
(``pip install 'syncprims[valkey]'``); the core itself depends on redis-py only.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import attrs
import redis
import redis.asyncio
from redis.backoff import NoBackoff

from syncprims._transport.caching import cache_free_pool
from syncprims._transport.compat import ERRORS, use_valkey, valkey_if_imported
from syncprims.errors import RedisConnectionError

__all__ = [
    "ACCEPTED",
    "ASYNC_ACCEPTED",
    "Source",
    "async_redis_from_url",
    "client_from_url",
    "aclose_source",
    "async_source",
    "close_source",
    "redact",
    "redis_from_url",
    "sync_source",
]

ACCEPTED = (
    "a redis:// / rediss:// / unix:// / redis+cluster:// / redis+sentinel:// URL (or "
    "valkey://...), a redis.Redis (also fakeredis.FakeRedis or a Sentinel master_for client), "
    "a redis.ConnectionPool or a redis.RedisCluster, or valkey-py's valkey.Valkey, "
    "valkey.ConnectionPool or valkey.ValkeyCluster"
)
ASYNC_ACCEPTED = (
    "a redis:// / rediss:// / unix:// / redis+cluster:// / redis+sentinel:// URL (or "
    "valkey://...), a redis.asyncio.Redis (also fakeredis.FakeAsyncRedis or a Sentinel "
    "master_for client), a redis.asyncio.ConnectionPool or a redis.asyncio.RedisCluster, or "
    "their valkey.asyncio twins"
)

T = TypeVar("T")

CONNECT_TIMEOUT = 5.0
"""``socket_connect_timeout`` of the clients made from a URL, unless the URL sets one."""


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


@attrs.frozen
class Source:
    """The redis-py object(s) a client talks through.

    Attributes:
        pool: the connection pool of one server or of a sentinel-managed master; ``None``
            for a cluster.
        cluster: the ``RedisCluster`` (either face's); ``None`` for one server.
        owned: the redis-py client syncprims made from a URL and closes at shutdown;
            ``None`` when the caller passed the object in (the caller owns it).
        address: where Redis is, for messages (no password).
        socket_timeout: the client's reply timeout, seconds, or ``None`` when it has none.
        connect_timeout: the longest opening one connection can take, seconds: the client's
            ``socket_connect_timeout`` times the attempts its ``Retry`` makes, plus the
            back-off between them; ``None`` when it has no connect timeout.
        in_process: the server is in this process (fakeredis): no network to wait for.
        twin: a cache-free twin of the caller's pool that syncprims made (its client caches
            replies: :mod:`syncprims._transport.caching`) and disconnects at shutdown;
            ``None`` otherwise.
    """

    pool: Any
    cluster: Any
    owned: Any
    address: str
    socket_timeout: float | None
    connect_timeout: float | None
    in_process: bool = False
    twin: Any = None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _pool_address(pool: Any) -> str:
    server = pool.connection_kwargs.get("server")
    if server is not None:  # fakeredis
        return f"fakeredis server {getattr(server, 'name', '')}".rstrip()
    service = getattr(pool, "service_name", None)
    if service is not None:  # a SentinelConnectionPool
        return f"sentinel master {service!r}"
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _connect_bound(kwargs: dict[str, Any]) -> float | None:
    """How long opening a connection can take with these settings (see ``Source``).

    redis-py retries the socket connection (and a TLS handshake) with the client's ``Retry``;
    the credentials exchange after it is not retried.
    """
    single = _float(kwargs.get("socket_connect_timeout"))
    if single is None:
        return None
    retry = kwargs.get("retry")
    retries = 0
    pause = 0.0
    if retry is not None:
        try:
            retries = max(0, int(retry.get_retries()))
        except (AttributeError, TypeError, ValueError):
            retries = 0
        pause = _float(getattr(getattr(retry, "_backoff", None), "_cap", None)) or 0.0
    return single * (retries + 1) + pause * retries


def _pool_source(pool: Any, owned: Any) -> Source:
    pool, made = cache_free_pool(pool)
    kwargs = pool.connection_kwargs
    return Source(
        pool=pool,
        cluster=None,
        owned=owned,
        address=_pool_address(pool),
        socket_timeout=_float(kwargs.get("socket_timeout")),
        connect_timeout=_connect_bound(kwargs),
        in_process=type(pool).__module__.startswith("fakeredis")
        or getattr(pool, "connection_class", object).__module__.startswith("fakeredis"),
        twin=pool if made else None,
    )


def _cluster_source(cluster: Any, kwargs: dict[str, Any], owned: Any) -> Source:
    nodes = cluster.get_nodes() if hasattr(cluster, "get_nodes") else []
    address = ",".join(f"{n.host}:{n.port}" for n in nodes) or "a Redis Cluster"
    return Source(
        pool=None,
        cluster=cluster,
        owned=owned,
        address=address,
        socket_timeout=_float(kwargs.get("socket_timeout")),
        connect_timeout=_connect_bound(kwargs),
    )


def sync_source(
    source: object, *, timeout: float | None = None, connect_timeout: float | None = None
) -> Source:
    """The pool or cluster to use for ``source`` (the argument of ``syncprims.connect``).

    Args:
        source: a URL or a blocking redis-py object (see the module docstring).
        timeout: with a URL: the made client's ``socket_timeout``, seconds.
        connect_timeout: with a URL: its ``socket_connect_timeout``, seconds (default 5).

    Raises:
        TypeError: ``source`` is none of the accepted types (the message names them).
        ValueError: a bad URL.
        RedisConnectionError: a cluster URL whose seeds do not answer.
    """
    if isinstance(source, str):
        client = _made(
            lambda: client_from_url(source, timeout=timeout, connect_timeout=connect_timeout),
            source,
        )
        return _from_object(client, owned=client, asynchronous=False)
    return _from_object(source, owned=None, asynchronous=False)


def _kinds(asynchronous: bool) -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(client, pool, cluster) classes of one face, redis-py's and, when the application
    imported it, valkey-py's."""
    libraries: list[Any] = [redis.asyncio if asynchronous else redis]
    valkey = valkey_if_imported()
    if valkey is not None:
        libraries.append(valkey.asyncio if asynchronous else valkey)
    clients = tuple(
        getattr(lib, name)
        for lib in libraries
        for name in ("Redis", "Valkey")
        if hasattr(lib, name)
    )
    pools = tuple(lib.ConnectionPool for lib in libraries)
    clusters = tuple(
        getattr(lib, name)
        for lib in libraries
        for name in ("RedisCluster", "ValkeyCluster")
        if hasattr(lib, name)
    )
    return clients, pools, clusters


def _display(obj: object) -> str:
    """``redis.asyncio.Redis``, ``valkey.ConnectionPool``...: an object's class as users
    spell it (the library, its asyncio package, the class)."""
    module = type(obj).__module__
    face = ".asyncio" if ".asyncio" in module else ""
    return f"{module.partition('.')[0]}{face}.{type(obj).__name__}"


async def async_source(
    source: object, *, timeout: float | None = None, connect_timeout: float | None = None
) -> Source:
    """The pool or cluster to use for ``source`` (the argument of
    ``syncprims.asyncio.connect``).

    A ``redis.asyncio.RedisCluster`` that has not loaded its slot map yet is initialized here.

    Raises:
        TypeError: ``source`` is none of the accepted types (the message names them).
        ValueError: a bad URL.
    """
    if isinstance(source, str):
        client = _made(
            lambda: _from_url(
                source, timeout=timeout, connect_timeout=connect_timeout, asynchronous=True
            ),
            source,
        )
        try:
            return await _from_async_object(client, owned=client)
        except BaseException:
            await client.aclose()
            raise
    return await _from_async_object(source, owned=None)


async def _from_async_object(source: object, *, owned: Any) -> Source:
    if isinstance(source, _kinds(asynchronous=True)[2]):
        try:
            await source.initialize()  # type: ignore[attr-defined]  # loads the slot map
        except ERRORS.failures as error:
            raise RedisConnectionError(
                f"no node of the cluster answered: {error}", maybe_executed=False
            ) from error
    return _from_object(source, owned=owned, asynchronous=True)


_FACES = {  # a face's kind of client, its connect() and what that takes
    False: ("a blocking", "syncprims.connect()", ACCEPTED),
    True: ("an asyncio", "syncprims.asyncio.connect()", ASYNC_ACCEPTED),
}


def _from_object(source: object, *, owned: Any, asynchronous: bool) -> Source:
    """The :class:`Source` of a client, pool or cluster (its slot map loaded) of one face.

    Raises:
        TypeError: ``source`` is of the other face, or of no accepted type (the message
            names them).
    """
    clients, pools, clusters = _kinds(asynchronous)
    if isinstance(source, clients):
        return _pool_source(source.connection_pool, owned)  # type: ignore[attr-defined]
    if isinstance(source, pools):
        return _pool_source(source, owned)
    if isinstance(source, clusters):
        return _cluster_source(source, source.get_connection_kwargs(), owned)  # type: ignore[attr-defined]
    kind, connect, accepted = _FACES[asynchronous]
    if isinstance(source, sum(_kinds(not asynchronous), ())):
        other, other_connect, _ = _FACES[not asynchronous]
        raise TypeError(
            f"{_display(source)} is {other} client object: pass it to {other_connect}, or "
            f"pass {connect} {kind} client"
        )
    raise TypeError(f"{connect} takes {accepted}; got {type(source).__name__}")


def close_source(source: Source) -> None:
    """Close what syncprims made for a blocking client: the client it made from a URL (and
    its sentinels' clients), a cache-free twin pool. The caller's objects stay open."""
    if source.twin is not None:
        source.twin.disconnect()
    client = source.owned
    if client is None:
        return
    client.close()
    for sentinel in _sentinels(client):
        sentinel.close()


async def aclose_source(source: Source) -> None:
    """The asyncio twin of :func:`close_source`."""
    if source.twin is not None:
        await source.twin.disconnect()
    client = source.owned
    if client is None:
        return
    await client.aclose()
    for sentinel in _sentinels(client):
        await sentinel.aclose()


def _sentinels(client: Any) -> list[Any]:
    pool = getattr(client, "connection_pool", None)
    manager = getattr(pool, "sentinel_manager", None)
    return list(manager.sentinels) if manager is not None else []


# -- URLs ------------------------------------------------------------------------------------


_MULTI = ("redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")
_SINGLE = ("redis", "rediss", "unix")
_VALKEY_MULTI = ("valkey+cluster", "valkeys+cluster", "valkey+sentinel", "valkeys+sentinel")
_VALKEY_SINGLE = ("valkey", "valkeys")


def _made(make: Callable[[], T], url: str) -> T:
    """Make a client from a URL; a cluster whose seeds do not answer fails here."""
    try:
        return make()
    except ERRORS.failures as error:
        raise RedisConnectionError(
            f"could not reach Redis at {redact(url)}: {error}", maybe_executed=False
        ) from error


def _defaults(timeout: float | None, connect_timeout: float | None, retry: Any) -> dict[str, Any]:
    return {
        "socket_timeout": 3.0 if timeout is None else timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT if connect_timeout is None else connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": 0,
        "retry": retry,
    }


def _library(scheme: str, asynchronous: bool) -> SimpleNamespace:
    """The classes a URL's client is made of: redis-py's, or valkey-py's for ``valkey``
    schemes (imported then: ``ImportError`` naming the extra when it is missing)."""
    library: Any = redis
    name = "Redis"
    backoff: Any = NoBackoff
    parse_url: Callable[[str], dict[str, Any]] = redis.connection.parse_url
    if scheme.startswith("valkey"):
        library = use_valkey()
        from valkey._parsers.url_parser import parse_url as vparse_url  # every 6.x
        from valkey.backoff import NoBackoff as VNoBackoff

        name, backoff = "Valkey", VNoBackoff
        parse_url = functools.partial(vparse_url, async_connection=asynchronous)
    face = f"{library.__name__}.asyncio" if asynchronous else library.__name__
    for module in ("cluster", "retry", "sentinel"):
        importlib.import_module(f"{face}.{module}")
    classes = sys.modules[face]
    return SimpleNamespace(
        client=getattr(classes, name),
        cluster=getattr(classes, f"{name}Cluster"),
        node=classes.cluster.ClusterNode,
        sentinel=classes.sentinel.Sentinel,
        retry=classes.retry.Retry(backoff(), 0),
        parse_url=parse_url,
    )


def _node_kwargs(
    url: str, host: str, defaults: dict[str, Any], parse_url: Callable[[str], dict[str, Any]]
) -> dict[str, Any]:
    """The client's keyword arguments for one host of a multi-host URL (its query included)."""
    parts = urlsplit(url)
    base = parts.scheme.split("+")[0]
    userinfo = parts.netloc.rpartition("@")[0]
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "sentinel_password"]
    single = f"{base}://{userinfo + '@' if userinfo else ''}{host}/?{urlencode(query)}"
    kwargs = dict(defaults)
    kwargs.update(parse_url(single))
    kwargs.pop("host", None)
    kwargs.pop("port", None)
    if kwargs.pop("connection_class", None) is not None:  # rediss: TLS for every node
        kwargs["ssl"] = True
    return kwargs


def _hosts(url: str) -> list[tuple[str, int]]:
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    if not hosts:
        raise ValueError(f"no hosts in {redact(url)!r}")
    out = []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise ValueError(f"hosts must be host:port pairs in {redact(url)!r}, got {host!r}")
        out.append((name, int(port)))
    return out


def _check_scheme(url: object, *, valkey: bool = True) -> str:
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    scheme = urlsplit(url).scheme
    known_schemes = _SINGLE + _MULTI + ((_VALKEY_SINGLE + _VALKEY_MULTI) if valkey else ())
    if scheme not in known_schemes:
        known = ", ".join(s + "://" for s in known_schemes)
        raise ValueError(f"the URL must start with one of {known}; got {redact(url)!r}")
    return scheme


def _from_url(
    url: str,
    *,
    timeout: float | None,
    connect_timeout: float | None,
    asynchronous: bool,
    valkey: bool = True,
) -> Any:
    """A client of either face and either library for any URL form syncprims accepts
    (``valkey``: whether ``valkey://`` forms are accepted)."""
    scheme = _check_scheme(url, valkey=valkey)
    lib = _library(scheme, asynchronous)
    defaults = _defaults(timeout, connect_timeout, lib.retry)
    if asynchronous:
        defaults["socket_timeout"] = None
    if "+" not in scheme:  # one host
        return lib.client.from_url(url, **defaults)
    hosts = _hosts(url)
    kwargs = _node_kwargs(url, f"{hosts[0][0]}:{hosts[0][1]}", defaults, lib.parse_url)
    if scheme.endswith("+cluster"):
        kwargs.pop("db", None)
        nodes = [lib.node(h, p) for h, p in hosts]
        return lib.cluster(startup_nodes=nodes, **kwargs)
    master, sentinel_kwargs = _sentinel_parts(url, kwargs, 3.0 if timeout is None else timeout)
    sentinel = lib.sentinel(hosts, sentinel_kwargs=sentinel_kwargs, **kwargs)
    return sentinel.master_for(master, **kwargs)


def client_from_url(
    url: str, *, timeout: float | None = None, connect_timeout: float | None = None
) -> Any:
    """A blocking client for any URL form syncprims accepts, ``valkey://`` included (a
    valkey-py client then); see :func:`redis_from_url`."""
    return _from_url(url, timeout=timeout, connect_timeout=connect_timeout, asynchronous=False)


def redis_from_url(
    url: str, *, timeout: float | None = None, connect_timeout: float | None = None
) -> redis.Redis | redis.RedisCluster:
    """A blocking redis-py client for any URL form syncprims accepts.

    ``redis://``, ``rediss://`` and ``unix://`` go to ``redis.Redis.from_url`` (its query
    parameters apply); ``redis+cluster://h:p,h:p`` gives a ``RedisCluster`` seeded by those
    nodes; ``redis+sentinel://h:p,h:p/master_name`` the master's client from a ``Sentinel``
    (``?sentinel_password=`` for the sentinels' own password). The client has syncprims'
    defaults where the URL says nothing: ``socket_timeout`` ``timeout`` (3 s),
    ``socket_connect_timeout`` 5 s, keep-alive on, and no transport retries (syncprims
    decides what may be retried). ``valkey://`` URLs are for ``syncprims.connect()``, which
    makes a valkey-py client of them.

    Args:
        url: the URL.
        timeout: the reply timeout, seconds (``None``: 3 s).
        connect_timeout: the connect timeout, seconds (``None``: 5 s).

    Returns:
        A ``redis.Redis`` or a ``redis.RedisCluster``; the caller owns it.

    Raises:
        ValueError: an unknown scheme or a malformed multi-host URL.
        TypeError: ``url`` is not a ``str``.
    """
    client: redis.Redis | redis.RedisCluster = _from_url(
        url, timeout=timeout, connect_timeout=connect_timeout, asynchronous=False, valkey=False
    )
    return client


def async_redis_from_url(
    url: str, *, timeout: float | None = None, connect_timeout: float | None = None
) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
    """The ``redis.asyncio`` twin of ``redis_from_url`` (same URL forms and defaults, but
    no ``socket_timeout``: with one, redis-py runs every write through ``asyncio.wait_for``,
    so syncprims bounds each whole call itself instead, by its ``timeout`` option)."""
    client: redis.asyncio.Redis | redis.asyncio.RedisCluster = _from_url(
        url, timeout=timeout, connect_timeout=connect_timeout, asynchronous=True, valkey=False
    )
    return client


def _sentinel_parts(url: str, kwargs: dict[str, Any], timeout: float) -> tuple[str, dict[str, Any]]:
    parts = urlsplit(url)
    master = parts.path.strip("/")
    if not master:
        raise ValueError(f"a sentinel URL needs the master name as its path: {redact(url)!r}")
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": kwargs.get("socket_connect_timeout"),
    }
    password = dict(parse_qsl(parts.query)).get("sentinel_password")
    if password is not None:
        sentinel_kwargs["password"] = password
    return master, sentinel_kwargs
