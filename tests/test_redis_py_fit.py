"""syncprims inside an existing redis-py application (issue: fit into redis-py).

* Every accepted source, in both faces, against a real server, a Redis Cluster, a
  Sentinel-managed master and fakeredis: a contended lock (the waiter is woken through the
  pub/sub connection), a semaphore, shutdown; the caller's client works afterwards.
* The caller's client name and ACL user are what Redis sees on every syncprims connection,
  the subscriber's included; nothing else is opened.
* A wrong type is a ``TypeError`` naming what is accepted.
* Where syncprims keeps its own code instead of redis-py's, a test shows what redis-py's
  default would break: its ``Retry`` re-sends an acquire whose reply was lost (the hold is
  counted twice), and its asyncio pool hands out a connection the server has closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer
from syncprims._protocol import scripts
from syncprims._transport.compat import atake
from tests.faults.proxy import FaultProxy
from tests.harness import raw_command, redis_py_version
from tests.server_groups import RedisClusterSet, SentinelSet

pytestmark = [pytest.mark.real]

ACL_USER = "app-user"
ACL_PASSWORD = "app-pw-1"


@pytest.fixture(scope="module")
def acl_server(redis_server: RedisServer) -> RedisServer:
    """The session server, with a least-privilege ACL user for the application."""
    admin = redis.Redis(port=redis_server.port)
    admin.acl_setuser(
        ACL_USER, enabled=True, passwords=[f"+{ACL_PASSWORD}"], keys=["fit:*", "*{fit:*"],
        channels=["*"], commands=["+@all", "-flushall", "-flushdb"],
    )  # fmt: skip
    admin.close()
    return redis_server


def _connections(port: int, name: str) -> list[dict[str, Any]]:
    admin = redis.Redis(port=port)
    try:
        return [c for c in admin.client_list() if c.get("name") == name]
    finally:
        admin.close()


# -- the sync face ------------------------------------------------------------------------------


def _sync_source(
    kind: str,
    client_name: str,
    acl: RedisServer,
    cluster: RedisClusterSet,
    sentinels: SentinelSet,
) -> tuple[Any, Callable[[], Any], list[int]]:
    """(what the application passes, a call that proves it still works, the ports to look at)."""
    credentials: dict[str, Any] = {
        "username": ACL_USER,
        "password": ACL_PASSWORD,
        "client_name": client_name,
    }
    if kind == "url":
        url = f"redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{acl.port}?client_name={client_name}"
        return url, lambda: None, [acl.port]
    if kind == "redis":
        r = redis.Redis(port=acl.port, decode_responses=True, **credentials)
        return r, r.ping, [acl.port]
    if kind == "pool":
        pool = redis.ConnectionPool(port=acl.port, **credentials)
        return pool, lambda: redis.Redis(connection_pool=pool).ping(), [acl.port]
    if kind == "blocking-pool":
        pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call, unused-ignore]
            port=acl.port, max_connections=5, **credentials
        )
        return pool, lambda: redis.Redis(connection_pool=pool).ping(), [acl.port]
    if kind == "resp3":
        r = redis.Redis(port=acl.port, protocol=3, **credentials)
        return r, r.ping, [acl.port]
    if kind == "fakeredis":
        fake = fakeredis.FakeRedis()
        return fake, fake.ping, []
    if kind == "cluster":
        first = cluster.masters()[0]
        rc = redis.RedisCluster(host="127.0.0.1", port=first.port, client_name=client_name)
        return rc, rc.ping, [m.port for m in cluster.masters()]
    if kind == "sentinel":
        hosts = [("127.0.0.1", s.port) for s in sentinels.sentinels]
        # redis-py 8.2 annotates Sentinel; older lines do not.
        manager = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            hosts, socket_timeout=1
        )
        master = manager.master_for(  # type: ignore[no-untyped-call, unused-ignore]
            sentinels.master_name, socket_timeout=1, client_name=client_name
        )
        return master, master.ping, [sentinels.master_port()]
    raise AssertionError(kind)


SYNC_KINDS = ["url", "redis", "pool", "blocking-pool", "resp3", "fakeredis", "cluster", "sentinel"]


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_every_accepted_source_sync(
    kind: str, acl_server: RedisServer, redis_cluster: RedisClusterSet, sentinels: SentinelSet
) -> None:
    client_name = f"fit-sync-{kind}-{uuid.uuid4().hex[:6]}"
    source, still_works, ports = _sync_source(
        kind, client_name, acl_server, redis_cluster, sentinels
    )
    name = f"fit:{uuid.uuid4().hex}"
    client = syncprims.connect(source, lock_watchdog_timeout=10)
    try:
        lock = client.get_lock(name)
        lock.lock()
        outcome: list[float] = []

        def waiter() -> None:
            started = time.monotonic()
            assert lock.try_lock(wait_time=10)
            outcome.append(time.monotonic() - started)
            lock.unlock()

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.3)  # the waiter is subscribed and waiting
        lock.unlock()
        thread.join(15)
        assert outcome and outcome[0] < 5  # woken by the release message, not the 10 s lease
        sem = client.get_semaphore(name + ":s")
        assert sem.try_set_permits(1)
        assert sem.acquire(False) and not sem.acquire(False)
        sem.release()
        seen = [c for port in ports for c in _connections(port, client_name)]
        if ports:
            # Redis sees the caller's settings on syncprims' connections, the subscriber's too.
            assert seen
            assert any(c["cmd"] in ("subscribe", "ssubscribe") for c in seen), seen
            if kind not in ("cluster", "sentinel"):
                assert {c["user"] for c in seen} == {ACL_USER}
    finally:
        client.shutdown()
    still_works()  # the caller's client is open and usable
    if ports:
        subscribers = [
            c for port in ports for c in _connections(port, client_name) if "subscribe" in c["cmd"]
        ]
        assert subscribers == []  # the subscriber connection went back (closed) to the pool
    if kind == "url":
        assert _connections(acl_server.port, client_name) == []  # syncprims' own: closed


# -- the asyncio face ---------------------------------------------------------------------------


async def _async_source(
    kind: str,
    client_name: str,
    acl: RedisServer,
    cluster: RedisClusterSet,
    sentinels: SentinelSet,
) -> tuple[Any, list[int]]:
    credentials: dict[str, Any] = {
        "username": ACL_USER,
        "password": ACL_PASSWORD,
        "client_name": client_name,
    }
    if kind == "url":
        url = f"redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{acl.port}?client_name={client_name}"
        return url, [acl.port]
    if kind == "redis":
        return redis.asyncio.Redis(port=acl.port, decode_responses=True, **credentials), [acl.port]
    if kind == "pool":
        return redis.asyncio.ConnectionPool(port=acl.port, **credentials), [acl.port]
    if kind == "fakeredis":
        return fakeredis.FakeAsyncRedis(), []
    if kind == "cluster":
        first = cluster.masters()[0]
        rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=first.port, client_name=client_name)
        return rc, [m.port for m in cluster.masters()]
    if kind == "sentinel":
        hosts = [("127.0.0.1", s.port) for s in sentinels.sentinels]
        manager = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            hosts, socket_timeout=1
        )
        master = manager.master_for(
            sentinels.master_name, socket_timeout=1, client_name=client_name
        )
        _SENTINEL_CLIENTS.extend(manager.sentinels)
        return master, [sentinels.master_port()]
    raise AssertionError(kind)


_SENTINEL_CLIENTS: list[Any] = []
"""The asyncio Sentinel's own clients (the application closes them when it is done)."""


async def _still_works(source: Any) -> None:
    if isinstance(source, redis.asyncio.ConnectionPool):
        r = redis.asyncio.Redis(connection_pool=source)
        assert await r.ping()
        await source.disconnect()
    elif not isinstance(source, str):
        assert await source.ping()
        await source.aclose()
    while _SENTINEL_CLIENTS:
        await _SENTINEL_CLIENTS.pop().aclose()


@pytest.mark.parametrize("kind", ["url", "redis", "pool", "fakeredis", "cluster", "sentinel"])
async def test_every_accepted_source_async(
    kind: str, acl_server: RedisServer, redis_cluster: RedisClusterSet, sentinels: SentinelSet
) -> None:
    client_name = f"fit-async-{kind}-{uuid.uuid4().hex[:6]}"
    source, ports = await _async_source(kind, client_name, acl_server, redis_cluster, sentinels)
    name = f"fit:{uuid.uuid4().hex}"
    client = await syncprims.asyncio.connect(source, lock_watchdog_timeout=10)
    try:
        lock = client.get_lock(name)
        await lock.lock()

        async def waiter() -> float:
            started = time.monotonic()
            assert await lock.try_lock(wait_time=10)
            await lock.unlock()
            return time.monotonic() - started

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.3)
        await lock.unlock()
        assert await asyncio.wait_for(task, 15) < 5
        sem = client.get_semaphore(name + ":s")
        assert await sem.try_set_permits(1)
        assert await sem.acquire(False)
        assert not await sem.acquire(False)
        await sem.release()
        seen = [c for port in ports for c in _connections(port, client_name)]
        if ports:
            assert any(c["cmd"] in ("subscribe", "ssubscribe") for c in seen), seen
            if kind not in ("cluster", "sentinel"):
                assert {c["user"] for c in seen} == {ACL_USER}
    finally:
        await client.shutdown()
    await _still_works(source)
    if ports:
        await asyncio.sleep(0.1)
        subscribers = [
            c for port in ports for c in _connections(port, client_name) if "subscribe" in c["cmd"]
        ]
        assert subscribers == []


# -- wrong types ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source", [42, b"redis://x", object(), redis.asyncio.Redis(), redis.asyncio.ConnectionPool()]
)
def test_a_wrong_type_is_a_clear_type_error_sync(source: object) -> None:
    with pytest.raises(TypeError, match=r"redis\.Redis|syncprims\.asyncio") as info:
        syncprims.connect(source)  # type: ignore[arg-type]
    assert type(source).__name__ in str(info.value)


@pytest.mark.parametrize("source", [42, redis.Redis(), redis.ConnectionPool(), object()])
async def test_a_wrong_type_is_a_clear_type_error_async(source: object) -> None:
    with pytest.raises(TypeError, match=r"redis\.asyncio|syncprims\.connect") as info:
        await syncprims.asyncio.connect(source)  # type: ignore[arg-type]
    assert type(source).__name__ in str(info.value)


def test_connection_settings_are_not_options() -> None:
    with pytest.raises(TypeError, match="connection settings belong to the redis-py client"):
        syncprims.connect(fakeredis.FakeRedis(), password="x")  # type: ignore[call-arg]


# -- where redis-py's defaults would break a guarantee ------------------------------------------


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    p = FaultProxy(redis_server.port)
    yield p
    p.close()


def test_redis_py_retry_would_count_a_hold_twice(
    proxy: FaultProxy, redis_server: RedisServer
) -> None:
    """A lost reply: redis-py's ``Retry`` on timeouts (the default from redis-py 6; asked
    for with ``retry_on_error`` here so that every redis-py line shows it) sends the acquire
    again (hold count 2); syncprims sends it once and says it may have run (hold count 1)."""
    raw = redis.Redis(port=redis_server.port)
    name = f"fit:{uuid.uuid4().hex}"
    script = scripts.LOCK_ACQUIRE
    raw_command(raw, "SCRIPT", "LOAD", script.source)

    app = redis.Redis(
        port=proxy.port,
        socket_timeout=0.3,
        retry=Retry(NoBackoff(), 3),
        retry_on_error=[redis.exceptions.TimeoutError],
    )
    assert app.ping()
    proxy.drop_replies = 1  # the acquire runs; its reply is lost
    assert raw_command(app, "EVALSHA", script.sha, 1, name, 30_000, "owner-a") is None
    assert raw.hgetall(name) == {b"owner-a": b"2"}  # one acquire, counted twice
    app.close()

    other = f"fit:{uuid.uuid4().hex}"
    client = syncprims.connect(redis.Redis(port=proxy.port, socket_timeout=0.3))
    try:
        client.get_lock(other).lock(lease_time=5)  # loads nothing new, warms the connection
        client.get_lock(other).unlock()
        time.sleep(0.2)
        proxy.drop_replies = 1
        with pytest.raises(syncprims.RedisTimeoutError) as info:
            client.get_lock(other).try_lock(lease_time=30)
        assert info.value.maybe_executed
        assert list(raw.hgetall(other).values()) == [b"1"]  # sent once, counted once
    finally:
        client.shutdown()
        raw.close()


@pytest.mark.parametrize("shared", [0, 1])
async def test_redis_py_asyncio_pool_hands_out_a_closed_connection(shared: int) -> None:
    """After a server restart, redis-py 8.0 and 8.1's asyncio pool gives back a connection the
    server closed (its check is skipped while maintenance notifications are "auto"), so a
    command on it fails after it was sent; syncprims checks again and reconnects first (on
    every redis-py: other pools check, and syncprims' own check is the fallback of
    ``connections.astale``)."""
    with RedisServer() as server:
        app = redis.asyncio.Redis(port=server.port)  # its pool: maintenance notifications "auto"
        pool = app.connection_pool
        conn = await atake(pool)
        await pool.release(conn)
        mine = redis.asyncio.Redis(port=server.port)
        client = await syncprims.asyncio.connect(mine, retry_attempts=0, shared_connections=shared)
        lock = client.get_lock(f"fit:{uuid.uuid4().hex}")
        assert await lock.try_lock(lease_time=5)
        await lock.unlock()
        await asyncio.sleep(0.1)
        server.restart()
        await asyncio.sleep(0.5)
        stale = await atake(pool)
        await stale.send_command("PING")
        if redis_py_version()[:2] in ((8, 0), (8, 1)):
            with pytest.raises(redis.exceptions.ConnectionError):
                await stale.read_response()  # redis-py: the command went into a closed socket
        else:  # other redis-py lines check it (and miss the end with the pure-Python parser)
            with contextlib.suppress(redis.exceptions.ConnectionError):
                assert await stale.read_response() in (b"PONG", "PONG", True)
        await pool.release(stale)
        assert await lock.try_lock(lease_time=5)  # syncprims: reconnected before sending
        await lock.unlock()
        await client.shutdown()
        await mine.aclose()
        await app.aclose()


def test_shutdown_gives_every_connection_back_to_the_callers_pool_sync(
    redis_server: RedisServer,
) -> None:
    # The transport keeps a few connections checked out between calls (a plain
    # ConnectionPool only); shutdown must hand all of them back, and the pool stays usable.
    r = redis.Redis(port=redis_server.port)
    pool = r.connection_pool
    client = syncprims.connect(r)

    def work(i: int) -> None:
        lock = client.get_lock(f"fit:idle:{i}")
        for _ in range(20):
            with lock:
                pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert pool._in_use_connections, "expected connections kept between calls"
    client.shutdown()
    assert not pool._in_use_connections
    assert r.ping() is True
    r.close()


def test_shutdown_waits_for_a_blocking_call_of_the_services_sync(
    redis_server: RedisServer,
) -> None:
    # The services run their blocking calls (the janitor's UNLINK, renewals) on worker
    # threads; one still out when shutdown begins ends before shutdown returns, so its
    # connection is back in the pool too (seen on a loaded machine: a janitor's UNLINK
    # still out after shutdown() returned).
    r = redis.Redis(port=redis_server.port)
    pool = r.connection_pool
    client = syncprims.connect(r)
    ex = client._ex
    sent = threading.Event()

    async def slow_call() -> None:
        sent.set()
        await ex.transport.command("BLPOP", "fit:nothing", "0.5", context="a slow call")

    ex.background(slow_call)
    assert sent.wait(5)
    started = time.monotonic()
    client.shutdown()
    assert not pool._in_use_connections
    assert time.monotonic() - started < 5  # bounded: the call's own 0.5 s, not a hang
    r.close()


@pytest.mark.parametrize("shared", [0, 1])
async def test_shutdown_gives_every_connection_back_to_the_callers_pool_async(
    redis_server: RedisServer, shared: int
) -> None:
    # With shared connections (the default) the calls never take the pool's connections;
    # without, they do, and shutdown gives every one back.
    r = redis.asyncio.Redis(port=redis_server.port)
    pool = r.connection_pool
    client = await syncprims.asyncio.connect(r, shared_connections=shared)

    async def work(i: int) -> None:
        lock = client.get_lock(f"fit:idle:a{i}")
        for _ in range(20):
            async with lock:
                await asyncio.sleep(0)

    await asyncio.gather(*(asyncio.create_task(work(i)) for i in range(6)))
    assert bool(pool._in_use_connections) == (shared == 0)
    await client.shutdown()
    assert not pool._in_use_connections
    assert await r.ping() is True
    await r.aclose()
