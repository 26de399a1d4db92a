"""Client-side caching: syncprims never reads through a caching connection.

A caller's redis-py client built with ``protocol=3`` and ``cache_config=`` (or ``cache=``)
keeps a local cache of read replies (redis-py 5.1 and newer; the server must be Redis 7.4+).
Such a pool hands out ``CacheProxyConnection`` objects (redis-py 8.1
``ConnectionPool.make_connection``, ``redis/connection.py:3326``), and each of them turns
``CLIENT TRACKING ON`` when it connects (``_enable_tracking_callback``, ``:1656``, ``:2034``).
syncprims cannot read lock state through them, for three reasons found in redis-py's code:

* **Cached replies on the wrong command** (redis-py 5.1 to 8.0): the proxy's
  ``send_packed_command`` forwards the bytes without clearing the cache key the last
  ``send_command`` left (it clears it only from 8.1, ``connection.py:1747``), and that key
  stays set after a ``None`` reply (``:1857``) or, in 5.1, after a cache hit. syncprims' next
  command on such a connection could then be answered from the cache (an application's
  cached ``GET``), or its reply stored in the cache as that ``GET``'s value.
* **Invalidations in place of replies** (every version with caching): with tracking on, the
  server pushes ``invalidate`` messages on the connection that read a key when the key
  changes. syncprims reads with ``read_response(push_request=True)``, and with that flag
  redis-py returns what the push handler returns (``_parsers/resp3.py:150``,
  ``_parsers/hiredis.py:252``): ``None`` from ``_on_invalidation_callback``
  (``connection.py:2048``). A lock check would read "not held" and every later reply on that
  connection would be one behind.
* **Replies swallowed**: the proxy's ``send_command`` first drains whatever the socket holds
  (``_process_pending_invalidations``, ``connection.py:1751`` and ``:2039``). On syncprims'
  subscriber connection, where one thread sends ``SUBSCRIBE`` / ``UNSUBSCRIBE`` / ``PING``
  while the reader thread reads, that drain discards messages and replies the reader has not
  read yet (a lost wake-up). It also drops ``check_health=False`` (``connection.py:1748``).

So syncprims takes its own connections: :func:`cache_free_pool` returns a twin of such a pool
(same class, connection class, connection settings and size, no cache), which syncprims owns
and disconnects at shutdown; none of its connections enables tracking. The application's
client and its cache are untouched. valkey-py's older per-connection cache (``cache_enabled`` /
``client_cache`` connection settings, tracking turned on in ``on_connect``) is handled the same
way. A pool without a cache is returned as it is, and nothing here imports redis-py's cache
module, so redis-py 5.0 (no caching) and valkey-py work unchanged. redis-py's asyncio pools
have no client-side caching up to 8.1; should one gain a ``cache``, the same twin is made.
"""

from __future__ import annotations

from typing import Any

__all__ = ["cache_free_pool", "caches"]

# Settings that give a connection (or a pool) a client-side cache: redis-py 5.1+ pools take
# ``cache`` / ``cache_config`` (and pop them from connection_kwargs); valkey-py's connections
# take ``cache_enabled`` / ``client_cache`` themselves.
_POOL_CACHE_KEYS = ("cache", "cache_config", "cache_factory")
_CONNECTION_CACHE_KEYS = ("cache_enabled", "client_cache")
# Per-pool objects a pool puts into its own connection_kwargs: the twin makes its own.
_PER_POOL_KEYS = ("maint_notifications_pool_handler",)


def caches(pool: Any) -> bool:
    """Whether ``pool``'s connections keep a client-side cache (and track keys)."""
    if getattr(pool, "cache", None) is not None:  # redis-py 5.1+ (CacheProxyConnection)
        return True
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return False
    return bool(kwargs.get("cache_enabled")) or kwargs.get("client_cache") is not None


def cache_free_pool(pool: Any) -> tuple[Any, bool]:
    """``pool`` itself when it has no client-side cache, else a twin of it without one.

    The twin has ``pool``'s class, connection class, connection settings (host, credentials,
    TLS, database, client name, timeouts, retry, protocol) and size (``max_connections``; a
    blocking pool's ``timeout``; a sentinel pool's master and sentinels), and no cache.

    Args:
        pool: a connection pool of redis-py (either face, any version from 5.0), valkey-py
            or fakeredis.

    Returns:
        ``(pool, False)`` when ``pool`` has no cache; ``(twin, True)`` otherwise: the caller
        owns the twin and disconnects it at shutdown (``twin.disconnect()``, awaited for an
        asyncio pool).

    Raises:
        TypeError: ``pool`` caches but is of a pool class whose constructor does not take
            these settings (a custom subclass): syncprims would rather refuse it than read
            through its cache.
    """
    if not caches(pool):
        return pool, False
    kwargs = dict(pool.connection_kwargs)
    for key in _POOL_CACHE_KEYS + _PER_POOL_KEYS:
        kwargs.pop(key, None)
    if kwargs.get("cache_enabled"):
        kwargs["cache_enabled"] = False
    if kwargs.get("client_cache") is not None:
        kwargs["client_cache"] = None
    try:
        twin = _twin(pool, kwargs)
    except Exception as error:
        raise TypeError(
            f"syncprims does not read through a client-side cache, and cannot make a "
            f"{type(pool).__name__} without one from this one ({error}): pass syncprims a "
            "client without cache_config / cache"
        ) from error
    if caches(twin):
        raise TypeError(
            f"syncprims does not read through a client-side cache, and a "
            f"{type(pool).__name__} made without cache settings still has one: pass syncprims "
            "a client without cache_config / cache"
        )
    return twin, True


def _twin(pool: Any, kwargs: dict[str, Any]) -> Any:
    kwargs["connection_class"] = pool.connection_class
    if getattr(pool, "max_connections", None) is not None:
        kwargs["max_connections"] = pool.max_connections
    if hasattr(pool, "queue_class") and hasattr(pool, "timeout"):  # BlockingConnectionPool
        kwargs["queue_class"] = pool.queue_class
        kwargs["timeout"] = pool.timeout
    if hasattr(pool, "service_name") and hasattr(pool, "sentinel_manager"):
        kwargs.pop("connection_pool", None)  # the original pool's proxy; the twin sets its own
        kwargs["is_master"] = getattr(pool, "is_master", True)
        kwargs["check_connection"] = getattr(pool, "check_connection", False)
        return type(pool)(pool.service_name, pool.sentinel_manager, **kwargs)
    return type(pool)(**kwargs)
