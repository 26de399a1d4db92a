"""The pub/sub registry: shared subscriptions, linger, wake rules, reconnects, close; the
reader thread of the sync face and the reader task of the asyncio face."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
import redis.asyncio

from syncprims import ClientClosedError
from syncprims._core.lock import lock_policy
from syncprims._protocol.contracts import WakePolicy
from syncprims._protocol.stepping import run
from syncprims._services import pubsub
from syncprims._services.pubsub import Subscription, TaskSubscriber, ThreadSubscriber
from tests.harness import raw_command


class Registry:
    """A :class:`ThreadSubscriber` with blocking ``acquire`` (it never suspends)."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self.driver = ThreadSubscriber(pool, address="test", timeout=2, name="test")

    def acquire(self, channel: str, policy: WakePolicy = lock_policy) -> Subscription:
        return run(self.driver.acquire(channel, policy))

    def release(self, sub: Subscription) -> None:
        self.driver.table.release(sub)

    def channels(self) -> list[str]:
        return list(self.driver.table.entries)  # in use or lingering

    @property
    def reconnects(self) -> int:
        return self.driver.reconnects

    def close(self) -> None:
        self.driver.close()


@pytest.fixture
def pool(real_url: str) -> Iterator[redis.ConnectionPool]:
    pool = redis.ConnectionPool.from_url(real_url, client_name="app-pubsub")
    yield pool
    pool.disconnect()


@pytest.fixture
def registry(pool: redis.ConnectionPool) -> Iterator[Registry]:
    reg = Registry(pool)
    yield reg
    reg.close()


@pytest.fixture
def raw(real_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(real_url)
    yield client
    client.close()


def _eventually(check: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def _subscribed(raw: redis.Redis, channel: str) -> bool:
    return bool(raw_command(raw, "PUBSUB", "NUMSUB", channel)[1])


def test_one_subscription_per_channel_shared_and_lingering(
    registry: Registry, raw: redis.Redis, name: str
) -> None:
    channel = f"ch:{name}"
    first = registry.acquire(channel, lock_policy)
    second = registry.acquire(channel, lock_policy)
    assert first is second
    assert first.ready.wait_sync(5)
    assert raw_command(raw, "PUBSUB", "NUMSUB", channel)[1] == 1
    registry.release(first)
    registry.release(second)
    assert _subscribed(raw, channel)  # lingers, in case it is needed again
    assert _eventually(lambda: not _subscribed(raw, channel), pubsub.LINGER + 3)
    assert channel not in registry.channels()


def test_reuse_within_the_linger_needs_no_new_confirmation(registry: Registry, name: str) -> None:
    channel = f"ch:{name}"
    sub = registry.acquire(channel, lock_policy)
    assert sub.ready.wait_sync(5)
    registry.release(sub)
    again = registry.acquire(channel, lock_policy)
    assert again is sub
    assert again.ready.wait_sync(0)
    registry.release(again)


def test_message_0_wakes_one_and_1_wakes_all(
    registry: Registry, raw: redis.Redis, name: str
) -> None:
    channel = f"ch:{name}"
    subs = [registry.acquire(channel, lock_policy) for _ in range(3)]
    assert subs[0].ready.wait_sync(5)
    woken: list[bool] = []
    threads = [
        threading.Thread(target=lambda s=s: woken.append(s.latch.wait_sync(5))) for s in subs
    ]
    for t in threads:
        t.start()
    assert _eventually(lambda: subs[0].latch.waiting() == 3)
    raw.publish(channel, "0")
    assert _eventually(lambda: len(woken) == 1)
    time.sleep(0.1)
    assert len(woken) == 1
    raw.publish(channel, "1")
    for t in threads:
        t.join(5)
    assert woken == [True, True, True]
    for s in subs:
        registry.release(s)


def test_an_unused_subscription_keeps_no_permit(
    registry: Registry, raw: redis.Redis, name: str
) -> None:
    channel = f"ch:{name}"
    sub = registry.acquire(channel, lock_policy)
    assert sub.ready.wait_sync(5)
    registry.release(sub)
    raw.publish(channel, "0")  # nobody waits: no permit may be kept
    time.sleep(0.1)
    again = registry.acquire(channel, lock_policy)
    assert not again.latch.wait_sync(0.05)
    registry.release(again)


def test_reconnects_resubscribes_and_wakes_waiters(
    registry: Registry, raw: redis.Redis, name: str
) -> None:
    channel = f"ch:{name}"
    sub = registry.acquire(channel, lock_policy)
    assert sub.ready.wait_sync(5)
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(sub.latch.wait_sync(10)))
    waiter.start()
    assert _eventually(lambda: sub.latch.waiting() == 1)
    raw_command(raw, "CLIENT", "KILL", "TYPE", "pubsub")
    waiter.join(10)
    assert woken == [True]  # woken by the reconnect, not by a message
    assert _eventually(lambda: registry.reconnects >= 1)
    assert _eventually(lambda: _subscribed(raw, channel))
    # Waiters are woken at the drop and again after the reconnect (messages may have been
    # lost in between): a spare permit is expected. Then messages flow again.
    time.sleep(0.2)
    sub.latch.drain()
    got: list[bool] = []
    again = threading.Thread(target=lambda: got.append(sub.latch.wait_sync(10)))
    again.start()
    assert _eventually(lambda: sub.latch.waiting() == 1)
    raw.publish(channel, "0")
    again.join(10)
    assert got == [True]
    registry.release(sub)


def test_close_fails_pending_and_wakes_waiters(pool: redis.ConnectionPool, name: str) -> None:
    reg = Registry(pool)
    sub = reg.acquire(f"ch:{name}", lock_policy)
    assert sub.ready.wait_sync(5)
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(sub.latch.wait_sync(10)))
    waiter.start()
    assert _eventually(lambda: sub.latch.waiting() == 1)
    reg.close()
    waiter.join(5)
    assert woken == [True]
    with pytest.raises(ClientClosedError):
        reg.acquire("other", lock_policy)


def test_the_subscriber_connection_is_the_pools_and_goes_back(
    pool: redis.ConnectionPool, raw: redis.Redis, name: str
) -> None:
    reg = Registry(pool)
    sub = reg.acquire(f"ch:{name}")
    assert sub.ready.wait_sync(5)
    names = [c["name"] for c in raw.client_list() if c["cmd"] in ("subscribe", "ssubscribe")]
    assert names == ["app-pubsub"]  # the caller's settings: its client name
    reg.release(sub)
    reg.close()
    assert _eventually(lambda: len(pool._in_use_connections) == 0)  # given back to the pool


# -- the asyncio face's reader task --------------------------------------------------------


async def _task_registry(real_url: str) -> tuple[TaskSubscriber, redis.asyncio.ConnectionPool]:
    pool = redis.asyncio.ConnectionPool.from_url(real_url, client_name="app-async-pubsub")
    return TaskSubscriber(pool, address="test", timeout=2, name="test"), pool


async def _eventually_async(check: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.01)
    return check()


@pytest.fixture(params=["callback", "task"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the asyncio subscriber reads its connection: parsed in the event loop's callback
    (``aio.replies.read_in_callback``, where redis-py's hiredis parser allows it) or by its
    reader task (``aread``, the fall-back for every other parser)."""
    if request.param == "task":
        monkeypatch.setattr(pubsub, "read_in_callback", lambda *args, **kwargs: False)
    return str(request.param)


def _check_reading(reg: pubsub.TaskSubscriber, reading: str) -> None:
    """The subscriber reads the way ``reading`` asks, where it can: a parser that
    ``read_in_callback`` does not know (pure Python, an older hiredis) keeps the task (no
    skip: a test skipped here would leave its connections open)."""
    from syncprims._transport.aio.replies import direct_replies

    conn = reg._conn
    assert conn is not None, "the subscriber has no connection"
    callback = reading == "callback" and direct_replies(conn) is not None
    assert (reg._lost is not None) == callback


async def test_task_reader_shares_lingers_and_wakes(real_url: str, name: str, reading: str) -> None:
    reg, pool = await _task_registry(real_url)
    raw = redis.Redis.from_url(real_url)
    channel = f"ch:{name}"
    subs = [await reg.acquire(channel, lock_policy) for _ in range(3)]
    assert subs[0] is subs[1] is subs[2]
    sub = subs[0]
    assert await sub.ready.wait_async(5)
    _check_reading(reg, reading)
    assert raw_command(raw, "PUBSUB", "NUMSUB", channel)[1] == 1
    waiters = [asyncio.ensure_future(sub.latch.wait_async(5)) for _ in range(3)]
    assert await _eventually_async(lambda: sub.latch.waiting() == 3)
    raw.publish(channel, "0")  # one
    assert await _eventually_async(lambda: sum(w.done() for w in waiters) == 1)
    await asyncio.sleep(0.1)
    assert sum(w.done() for w in waiters) == 1
    raw.publish(channel, "1")  # all
    assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == [True, True, True]
    for s in subs:
        reg.table.release(s)
    assert channel in reg.table.entries  # lingers
    assert await _eventually_async(
        lambda: raw_command(raw, "PUBSUB", "NUMSUB", channel)[1] == 0, pubsub.LINGER + 3
    )
    await reg.aclose()
    assert not pool._in_use_connections  # the subscriber connection went back
    raw.close()
    await pool.aclose()


async def test_task_reader_reconnects_and_close_wakes(
    real_url: str, name: str, reading: str
) -> None:
    reg, pool = await _task_registry(real_url)
    raw = redis.Redis.from_url(real_url)
    channel = f"ch:{name}"
    sub = await reg.acquire(channel, lock_policy)
    assert await sub.ready.wait_async(5)
    _check_reading(reg, reading)
    waiter = asyncio.ensure_future(sub.latch.wait_async(10))
    assert await _eventually_async(lambda: sub.latch.waiting() == 1)
    raw_command(raw, "CLIENT", "KILL", "TYPE", "pubsub")
    assert await asyncio.wait_for(waiter, 10)  # woken by the drop, not by a message
    assert await _eventually_async(lambda: reg.reconnects >= 1)
    assert await _eventually_async(lambda: raw_command(raw, "PUBSUB", "NUMSUB", channel)[1] == 1)
    await asyncio.sleep(0.2)
    sub.latch.drain()
    again = asyncio.ensure_future(sub.latch.wait_async(10))
    assert await _eventually_async(lambda: sub.latch.waiting() == 1)
    _check_reading(reg, reading)  # the new connection reads the same way
    raw.publish(channel, "0")
    assert await asyncio.wait_for(again, 10)
    last = asyncio.ensure_future(sub.latch.wait_async(10))
    assert await _eventually_async(lambda: sub.latch.waiting() == 1)
    await reg.aclose()
    assert await asyncio.wait_for(last, 5)
    with pytest.raises(ClientClosedError):
        await reg.acquire("other", lock_policy)
    reg.table.release(sub)
    raw.close()
    await pool.aclose()
