"""A release that reaches Redis late (found by the chaos campaign, issue 17).

A partition between a TCP proxy and Redis keeps an unlock in TCP's retransmission queue; the
client times out, and the unlock runs when the partition heals, seconds later. The hold's
field is Redisson's ``<client uuid>:<thread id>``, the same for every hold of one thread, so
before the fix the late unlock freed the thread's *next* hold of the lock (taken once the
first had expired, or after a retried unlock had answered and its latch key been deleted),
and another client was then granted the lock while its owner still used it.

Now (``LockCore``): a release whose outcome is unknown (a copy was sent and no reply read)
keeps its latch key for its whole TTL, so a late copy of a retried release is a no-op; and,
when it ended or may have ended the owner's last hold, the owner's next hold takes a new
field (``<client uuid>:<thread id>.<n>``), which a late copy cannot touch.

The proxy's ``hold_requests`` plays the partition: it keeps request bytes back and sends them
on when told, also for a connection the client has closed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer

from .proxy import FaultProxy

pytestmark = [pytest.mark.real, pytest.mark.faults]

OPTIONS: syncprims.ConnectOptions = {
    "timeout": 0.3,
    "retry_attempts": 2,
    "retry_delay": (0.02, 0.05),
}
NO_RETRY: syncprims.ConnectOptions = {**OPTIONS, "retry_attempts": 0}
SETTLE = 0.3  # after a warm-up unlock: its latch key's deletion (50 ms later) has gone by,
# so the one request the proxy holds back is the unlock under test


def _name(kind: str) -> str:
    return f"late:{kind}:{uuid.uuid4().hex[:12]}"


def _warm_up(lock: Any) -> None:
    """Load the lock's scripts (later EVALSHAs run at once), then let the unlock's latch
    deletion go by, so that the one request the proxy holds back is the unlock under test."""
    lock.lock(lease_time=0.4)
    lock.unlock()
    time.sleep(SETTLE)


def _wait_gone(raw: redis.Redis, name: str, bound: float = 5.0) -> None:
    deadline = time.monotonic() + bound
    while raw.exists(name) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not raw.exists(name)


@pytest.mark.parametrize("kind", ["lock", "fair", "fenced", "spin", "write"])
def test_a_release_delivered_after_the_next_hold_does_not_free_it(
    proxy: FaultProxy, raw: redis.Redis, redis_server: RedisServer, kind: str
) -> None:
    """The unlock never answered (every attempt held back), the hold expired, the same
    thread took the lock again: the late unlock must leave that new hold alone."""
    name = _name(kind)
    client = syncprims.connect(proxy.url, **NO_RETRY)
    other = syncprims.connect(redis_server.url)
    try:
        if kind == "write":
            lock = client.get_read_write_lock(name).write_lock()
            rival = other.get_read_write_lock(name).write_lock()
        else:
            getter = {
                "lock": "get_lock",
                "fair": "get_fair_lock",
                "fenced": "get_fenced_lock",
                "spin": "get_spin_lock",
            }[kind]
            lock = getattr(client, getter)(name)
            rival = getattr(other, getter)(name)
        _warm_up(lock)
        lock.lock(lease_time=0.4)
        proxy.hold_requests = 1  # the unlock goes into the partition
        with pytest.raises(syncprims.RedisTimeoutError) as caught:
            lock.unlock()
        assert caught.value.maybe_executed
        _wait_gone(raw, name)  # the first hold's lease ran out
        lock.lock(lease_time=10)  # the same thread, a new hold
        assert proxy.deliver_held() == 1  # the partition heals: the old unlock runs now
        time.sleep(0.2)
        assert raw.exists(name), "the late unlock freed the new hold"
        assert lock.is_held_by_current_thread()
        assert not rival.try_lock(0, 1)  # nobody else gets in
        lock.unlock()
        assert not raw.exists(name)
    finally:
        client.shutdown()
        other.shutdown()


def test_a_late_copy_of_a_retried_release_of_a_reentrant_hold_is_a_no_op(
    proxy: FaultProxy, raw: redis.Redis
) -> None:
    """The first unlock attempt is held back, the retry answers (hold count 2 -> 1): the held
    copy, delivered after the latch would have been deleted, must not count down again."""
    name = _name("reentrant")
    client = syncprims.connect(proxy.url, **OPTIONS)
    try:
        lock = client.get_lock(name)
        _warm_up(lock)
        lock.lock()
        lock.lock()
        assert lock.get_hold_count() == 2
        proxy.hold_requests = 1
        lock.unlock()  # the first attempt times out, the retry answers "still held"
        assert lock.get_hold_count() == 1
        time.sleep(0.3)  # the background deletion of finished latch keys runs every 50 ms
        assert proxy.deliver_held() == 1
        time.sleep(0.2)
        assert lock.get_hold_count() == 1, "the late copy counted the hold down again"
        assert raw.exists(name)
        lock.unlock()
        assert not raw.exists(name)
    finally:
        client.shutdown()


def test_a_late_copy_of_a_retried_last_release_leaves_the_next_hold_alone(
    proxy: FaultProxy, raw: redis.Redis, redis_server: RedisServer
) -> None:
    """The retry answers "released"; the thread takes the lock again at once: the held copy
    of the first attempt, delivered then, must not free it (the chaos campaign's second
    case: the latch key was deleted as soon as the retry answered)."""
    name = _name("retried")
    client = syncprims.connect(proxy.url, **OPTIONS)
    other = syncprims.connect(redis_server.url)
    try:
        lock = client.get_lock(name)
        _warm_up(lock)
        lock.lock()
        proxy.hold_requests = 1
        lock.unlock()  # answered by the retry
        assert not raw.exists(name)
        time.sleep(0.3)
        lock.lock()
        assert proxy.deliver_held() == 1
        time.sleep(0.2)
        assert lock.is_held_by_current_thread(), "the late copy freed the next hold"
        assert not other.get_lock(name).try_lock(0)
        lock.unlock()
        assert not raw.exists(name)
    finally:
        client.shutdown()
        other.shutdown()


def test_asyncio_a_release_delivered_after_the_next_hold_does_not_free_it(
    proxy: FaultProxy, raw: redis.Redis
) -> None:
    name = _name("aio")

    async def main() -> None:
        client = await syncprims.asyncio.connect(proxy.url, **NO_RETRY)
        try:
            lock = client.get_lock(name)
            await lock.lock(lease_time=0.4)
            await lock.unlock()
            await asyncio.sleep(SETTLE)
            await lock.lock(lease_time=0.4)
            proxy.hold_requests = 1
            with pytest.raises(syncprims.RedisTimeoutError):
                await lock.unlock()
            deadline = time.monotonic() + 5
            while raw.exists(name) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await lock.lock(lease_time=10)
            assert proxy.deliver_held() == 1
            await asyncio.sleep(0.2)
            assert await lock.is_held_by_current_thread()
            await lock.unlock()
            assert not raw.exists(name)
        finally:
            await client.shutdown()

    asyncio.run(main())


def test_a_thread_still_holding_keeps_its_field(proxy: FaultProxy, raw: redis.Redis) -> None:
    """A new field only for a fresh hold: while the thread holds the lock (a reentrant
    release was the unknown one), it keeps its field, so its own later unlocks still work."""
    name = _name("keep")
    client = syncprims.connect(proxy.url, **NO_RETRY)
    try:
        lock = client.get_lock(name)
        _warm_up(lock)
        lock.lock()
        lock.lock()
        proxy.hold_requests = 1
        with pytest.raises(syncprims.RedisTimeoutError):
            lock.unlock()  # hold count 2 -> 1, maybe: the thread still holds one
        assert proxy.deliver_held() == 1  # now it has run
        time.sleep(0.2)
        lock.lock()  # reentrant, the same field
        assert lock.get_hold_count() == 2
        lock.unlock()
        lock.unlock()
        assert not raw.exists(name)
    finally:
        client.shutdown()


def test_redlock_a_late_release_on_one_master_leaves_the_next_hold_there(
    redis_server: RedisServer, raw: redis.Redis
) -> None:
    """A RedLock unlock returns once a quorum released; the release still held back on the
    third master (its outcome unknown) must not free that master's next hold of the lock."""
    name = _name("redlock")
    others = [RedisServer(), RedisServer()]
    proxy = FaultProxy(redis_server.port)
    masters = syncprims.connect_many(
        [proxy.url, *(s.url for s in others)], timeout=0.3, retry_attempts=0
    )
    try:
        lock = masters.get_red_lock(name)
        _warm_up(lock)
        lock.lock(lease_time=0.4)
        assert raw.exists(name)  # the proxied master holds its part
        proxy.hold_requests = 1
        lock.unlock()  # two masters released: enough
        _wait_gone(raw, name)
        # All three hold the new hold. A quorum is two: on a loaded host the proxied
        # master's grant can come after the fan-out's grace and be given back (within its
        # 0.3 s timeout); then take the lock again until that master is part of it.
        for _ in range(20):
            lock.lock(lease_time=10)
            time.sleep(0.4)
            if raw.exists(name):
                break
            lock.unlock()
        assert raw.exists(name)
        assert proxy.deliver_held() == 1
        time.sleep(0.2)
        assert raw.exists(name), "the late release freed the master's part of the next hold"
        lock.unlock()
        _wait_gone(raw, name)  # the quorum's unlock returns first; the third follows
    finally:
        masters.shutdown()
        proxy.close()
        for server in others:
            server.stop()
