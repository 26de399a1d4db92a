"""syncprims takes cache-free connections from a client-side-caching redis-py pool.

Real redis-py cache objects (``CacheConfig``, ``DefaultCache``, the pools that hold them):
redis-py checks the server's version only when a connection connects, so nothing here needs
a server.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio
import redis.sentinel

from syncprims._transport.caching import cache_free_pool, caches

# Typed ``Any``: redis-py leaves these constructors unannotated.
BlockingConnectionPool: Any = redis.BlockingConnectionPool
Sentinel: Any = redis.sentinel.Sentinel


def _cache() -> Any:
    """redis-py's cache module (the tests that need it skip on redis-py 5.0, which has none)."""
    return pytest.importorskip("redis.cache", reason="redis-py < 5.1 has no client-side caching")


SETTINGS: dict[str, Any] = {
    "host": "redis.internal",
    "port": 6380,
    "db": 2,
    "username": "app",
    "password": "secret",
    "client_name": "orders",
    "socket_timeout": 1.5,
    "socket_connect_timeout": 0.5,
    "protocol": 3,
}


def _plain(conn: Any) -> bool:
    return type(conn).__name__ != "CacheProxyConnection" and not hasattr(conn, "_cache")


def _same_settings(twin: Any, pool: Any) -> None:
    for key, value in SETTINGS.items():
        assert twin.connection_kwargs.get(key) == value, key
    assert pool.connection_kwargs.get("password") == "secret"  # the original is untouched


def test_a_caching_pool_hands_out_cache_proxies() -> None:
    """The premise: a pool with ``cache_config`` wraps every connection it makes."""
    cache = _cache()
    pool = redis.ConnectionPool(cache_config=cache.CacheConfig(), **SETTINGS)
    assert caches(pool)
    conn = pool.make_connection()
    assert type(conn).__name__ == "CacheProxyConnection"


def test_the_twin_of_a_caching_pool_has_no_cache() -> None:
    cache = _cache()
    pool = redis.ConnectionPool(cache_config=cache.CacheConfig(), max_connections=7, **SETTINGS)
    twin, owned = cache_free_pool(pool)
    assert owned
    assert twin is not pool
    assert type(twin) is redis.ConnectionPool
    assert twin.cache is None
    assert not caches(twin)
    assert twin.max_connections == 7
    assert twin.connection_class is pool.connection_class
    _same_settings(twin, pool)
    conn = twin.make_connection()
    assert type(conn) is redis.Connection
    assert (conn.host, conn.port, conn.db) == ("redis.internal", 6380, 2)
    assert pool.cache is not None  # the application keeps its cache
    twin.disconnect()


def test_a_cache_object_passed_in() -> None:
    cache = _cache()
    own = cache.DefaultCache(cache.CacheConfig(max_size=10))
    client = redis.Redis(cache=own, **SETTINGS)
    assert caches(client.connection_pool)
    twin, owned = cache_free_pool(client.connection_pool)
    assert owned
    assert twin.cache is None
    assert _plain(twin.make_connection())
    _same_settings(twin, client.connection_pool)


def test_a_redis_client_with_cache_config() -> None:
    cache = _cache()
    client = redis.Redis(cache_config=cache.CacheConfig(), **SETTINGS)
    twin, owned = cache_free_pool(client.connection_pool)
    assert owned
    assert _plain(twin.make_connection())
    _same_settings(twin, client.connection_pool)


def test_a_blocking_pool_keeps_its_size_and_wait() -> None:
    cache = _cache()
    pool = BlockingConnectionPool(
        cache_config=cache.CacheConfig(), max_connections=3, timeout=4, **SETTINGS
    )
    twin, owned = cache_free_pool(pool)
    assert owned
    assert type(twin) is BlockingConnectionPool
    assert (twin.max_connections, twin.timeout) == (3, 4)
    assert twin.queue_class is pool.queue_class
    assert twin.cache is None
    conn = twin.make_connection()
    assert _plain(conn)
    _same_settings(twin, pool)


def test_a_sentinel_master_pool_follows_the_same_master() -> None:
    cache = _cache()
    sentinel = Sentinel([("localhost", 26379)])
    client = sentinel.master_for("mymaster", cache_config=cache.CacheConfig(), protocol=3)
    pool = client.connection_pool
    assert caches(pool)
    twin, owned = cache_free_pool(pool)
    assert owned
    assert type(twin) is type(pool)
    assert twin.cache is None
    assert twin.service_name == "mymaster"
    assert twin.sentinel_manager is sentinel
    assert twin.is_master
    assert twin.connection_class is pool.connection_class
    proxy = twin.connection_kwargs["connection_pool"]
    assert proxy is not pool.connection_kwargs["connection_pool"]
    conn = twin.make_connection()
    assert _plain(conn)
    assert conn.connection_pool is proxy


@pytest.mark.parametrize(
    "pool",
    [
        redis.ConnectionPool(),
        redis.ConnectionPool(protocol=3),
        BlockingConnectionPool(max_connections=2),
        redis.asyncio.ConnectionPool(protocol=3),
    ],
    ids=["resp2", "resp3", "blocking", "asyncio"],
)
def test_a_pool_without_a_cache_is_returned_as_it_is(pool: Any) -> None:
    assert not caches(pool)
    assert cache_free_pool(pool) == (pool, False)


def test_fakeredis_without_a_cache() -> None:
    fakeredis = pytest.importorskip("fakeredis")
    pool = fakeredis.FakeRedis().connection_pool
    assert cache_free_pool(pool) == (pool, False)


class _ValkeyStylePool:
    """A pool whose connections take the cache settings themselves (valkey-py 6)."""

    connection_class = redis.Connection

    def __init__(self, max_connections: int | None = None, **kwargs: Any) -> None:
        self.max_connections = max_connections
        self.connection_kwargs = kwargs


def test_a_per_connection_cache_is_switched_off() -> None:
    pool = _ValkeyStylePool(max_connections=5, cache_enabled=True, host="h", cache_max_size=9)
    assert caches(pool)
    twin, owned = cache_free_pool(pool)
    assert owned
    assert type(twin) is _ValkeyStylePool
    assert twin.connection_kwargs["cache_enabled"] is False
    assert twin.connection_kwargs["host"] == "h"
    assert twin.max_connections == 5
    assert not caches(twin)

    shared = _ValkeyStylePool(client_cache=object())
    twin, owned = cache_free_pool(shared)
    assert owned
    assert twin.connection_kwargs["client_cache"] is None
    assert not caches(twin)


def test_a_pool_it_cannot_remake_is_refused() -> None:
    cache = _cache()

    class Custom(redis.ConnectionPool):
        def __init__(self, url: str) -> None:
            super().__init__(cache_config=cache.CacheConfig(), protocol=3, host=url)

    with pytest.raises(TypeError, match="client-side cache"):
        cache_free_pool(Custom("h"))
