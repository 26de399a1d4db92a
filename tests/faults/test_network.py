"""Lost replies, latency, resets and an exhausted pool, through a fault-injecting TCP proxy.

What is shown: a lost reply never applies a lock operation twice (acquire scripts are not
re-sent once they may have run; unlock is re-sent but idempotent by its request id), and every
call ends within its stated bound (:attr:`Config.operation_timeout`). Figures are recorded as
test properties and quoted in docs/guarantees.md.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

import syncprims
import syncprims.asyncio as aio
from syncprims._embedded import RedisServer

from .proxy import FaultProxy

pytestmark = [pytest.mark.real, pytest.mark.faults]

Record = Callable[[str, object], None]

# Short timeouts so that every fault resolves in about a second.
FAST: dict[str, Any] = {
    "timeout": 0.5,
    "retry_attempts": 3,
    "retry_delay": (0.05, 0.2),
    "subscription_timeout": 1.0,
}


def test_a_lost_acquire_reply_is_not_resent(
    proxy: FaultProxy, raw: redis.Redis, name: str, record_property: Record
) -> None:
    client = syncprims.connect(proxy.url, **FAST)
    try:
        lock = client.get_lock(name)
        with lock:  # connected, and the script loaded: the next EVALSHA runs at once
            pass
        proxy.blackhole = True
        started = time.monotonic()
        with pytest.raises(syncprims.RedisTimeoutError) as caught:
            lock.try_lock(wait_time=5, lease_time=2)
        elapsed = time.monotonic() - started
        proxy.blackhole = False
        record_property("lost_acquire_reply_call_s", round(elapsed, 3))
        assert caught.value.maybe_executed
        # One attempt, not retried: an acquire that may have run is never sent again.
        assert elapsed < FAST["timeout"] + 0.4
        # It did run once: hold count 1, not 2; nobody renews it, so it ends with its lease.
        assert raw.hvals(name) == [b"1"]
        assert 0 < raw.pttl(name) <= 2000
        # The caller can find out, and give it back at once instead of waiting out the lease.
        assert lock.is_held_by_current_thread()
        lock.unlock()
        assert raw.exists(name) == 0
    finally:
        client.shutdown()


def test_a_lost_unlock_reply_is_resent_once_and_not_applied_twice(
    proxy: FaultProxy, raw: redis.Redis, name: str, record_property: Record
) -> None:
    client = syncprims.connect(proxy.url, **FAST)
    try:
        lock = client.get_lock(name)
        lock.lock(lease_time=30)
        lock.lock(lease_time=30)
        assert raw.hvals(name) == [b"2"]
        proxy.blackhole = True
        threading.Timer(0.3, lambda: setattr(proxy, "blackhole", False)).start()
        started = time.monotonic()
        lock.unlock()  # attempt 1 runs, its reply is lost; attempt 2 is answered from the latch
        elapsed = time.monotonic() - started
        record_property("lost_unlock_reply_call_s", round(elapsed, 3))
        assert elapsed < client.operation_timeout
        assert raw.hvals(name) == [b"1"]
        assert lock.get_hold_count() == 1
        lock.unlock()
        assert raw.exists(name) == 0
    finally:
        client.shutdown()


def test_latency_within_the_timeout_is_only_slower(proxy: FaultProxy, name: str) -> None:
    proxy.latency = 0.05  # each way: 100 ms round trips
    client = syncprims.connect(proxy.url, **FAST)
    try:
        lock = client.get_lock(name)
        started = time.monotonic()
        with lock:
            assert lock.is_locked()
        assert not lock.is_locked()
        assert time.monotonic() - started >= 0.3  # 3+ round trips really went through it
    finally:
        client.shutdown()


def test_latency_beyond_the_timeout_fails_within_the_operation_bound(
    proxy: FaultProxy, name: str, record_property: Record
) -> None:
    client = syncprims.connect(proxy.url, **FAST)
    try:
        lock = client.get_lock(name)
        assert not lock.is_locked()  # connected
        proxy.latency = 0.6  # 1.2 s round trips against a 0.5 s timeout
        started = time.monotonic()
        with pytest.raises(syncprims.RedisTimeoutError):
            lock.is_locked()  # a read: retried retry_attempts times, then raised
        elapsed = time.monotonic() - started
        record_property("slow_read_call_s", round(elapsed, 3))
        record_property("operation_timeout_s", client.operation_timeout)
        assert elapsed <= client.operation_timeout
        assert elapsed >= FAST["timeout"] * (FAST["retry_attempts"] + 1)
    finally:
        client.shutdown()


async def test_an_abandoned_acquire_is_released_when_its_late_reply_comes(
    proxy: FaultProxy, raw: redis.Redis, name: str, record_property: Record
) -> None:
    client = await aio.connect(proxy.url, **FAST)
    try:
        lock = client.get_lock(name)
        proxy.latency = 0.4  # 0.8 s round trip: the reply comes after the 0.5 s timeout
        with pytest.raises(syncprims.RedisTimeoutError):
            await lock.try_lock(wait_time=5, lease_time=30)
        proxy.latency = 0.0
        started = time.monotonic()
        while raw.exists(name):  # the late reply says "acquired": the client undoes it
            assert time.monotonic() - started < 5, "the orphaned acquisition stayed held"
            await asyncio.sleep(0.02)
        record_property("orphan_released_after_s", round(time.monotonic() - started, 3))
    finally:
        await client.shutdown()


def test_connection_resets_do_not_lose_a_held_lock_or_a_waiter(
    proxy: FaultProxy, raw: redis.Redis, name: str, record_property: Record
) -> None:
    holder = syncprims.connect(proxy.url, lock_watchdog_timeout=1, **FAST)
    waiter = syncprims.connect(proxy.url, **FAST)
    try:
        lock = holder.get_lock(name)
        lock.lock()  # watchdog lease 1 s, renewed every 1/3 s
        results: list[float] = []

        def wait() -> None:
            ok = waiter.get_lock(name).try_lock(wait_time=8, lease_time=5)
            results.append(time.monotonic() if ok else -1.0)

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.3)
        for _ in range(4):  # command and pub/sub connections of both clients torn down
            proxy.reset()
            time.sleep(0.4)
        assert not lock.is_lost
        assert lock.is_held_by_current_thread()
        released = time.monotonic()
        lock.unlock()
        thread.join(10)
        assert results and results[0] > 0, "the waiter did not get the lock"
        woken = results[0] - released
        record_property("waiter_after_resets_woken_s", round(woken, 3))
        # Woken by the unlock message on its re-made subscription, or at the latest by its
        # re-check (wait_recheck_interval): never stalled until its wait time.
        assert woken < waiter.config.wait_recheck_interval + 1
        assert raw.hvals(name) == [b"1"]
    finally:
        holder.shutdown()
        waiter.shutdown()


def test_an_exhausted_pool_fails_clearly_within_the_timeout(
    proxy: FaultProxy, name: str, record_property: Record
) -> None:
    # The application's pool: one connection, a caller waits at most 0.5 s for it.
    app_pool = redis.BlockingConnectionPool.from_url(
        proxy.url, max_connections=1, timeout=0.5, socket_timeout=0.5, socket_connect_timeout=0.5
    )
    client = syncprims.connect(app_pool, **{**FAST, "retry_attempts": 0})
    try:
        lock = client.get_lock(name)
        assert not lock.is_locked()
        proxy.blackhole = True  # the one connection is stuck until its timeout

        def call() -> tuple[float, BaseException | None]:
            started = time.monotonic()
            try:
                lock.is_locked()
            except syncprims.TransportError as error:
                return time.monotonic() - started, error
            return time.monotonic() - started, None

        with ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(lambda _: call(), range(4)))
        proxy.blackhole = False
        busy = [e for _, e in outcomes if isinstance(e, syncprims.RedisConnectionError)]
        assert busy, outcomes
        for error in busy:
            assert "no free connection" in str(error)
            assert not error.maybe_executed  # nothing was sent: safe to retry
        assert all(e is not None for _, e in outcomes)  # every call failed: nothing hangs
        # One call holds the connection for one timeout; a waiter gives up after one timeout.
        longest = max(t for t, _ in outcomes)
        record_property("pool_exhausted_longest_call_s", round(longest, 3))
        assert longest < 2 * FAST["timeout"] + 0.5
        assert not lock.is_locked()  # usable again
    finally:
        client.shutdown()
        app_pool.disconnect()


def test_a_grant_that_comes_after_its_lease_is_not_taken(
    proxy: FaultProxy, raw: redis.Redis, name: str
) -> None:
    # Found by the chaos campaign: a client paused mid-acquire read a grant whose lease had
    # run out, and entered the lock someone else held by then. A reply that comes later than
    # the lease it asked for is refused and what may be left is given back.
    client = syncprims.connect(proxy.url, timeout=3)
    try:
        lock = client.get_lock(name)
        proxy.latency = 0.15  # each way: the grant comes 0.3 s after it was asked for
        assert not lock.try_lock(lease_time=0.25)
        assert not lock.is_held_by_current_thread()
        proxy.latency = 0.0
        assert raw.exists(name) == 0  # given back (or expired), not left to anyone
        assert lock.try_lock(lease_time=5)  # a timely grant is taken as always
        lock.unlock()
    finally:
        proxy.latency = 0.0
        client.shutdown()


@pytest.mark.parametrize("side", ["write", "read"])
def test_a_late_reentrant_grant_given_back_keeps_the_hold_under_it(
    proxy: FaultProxy, raw: redis.Redis, name: str, side: str
) -> None:
    # A write lock's reentrant acquire adds its lease to the lock's TTL, a read lock's keeps
    # the longer one: the hold under it outlives a late grant's lease. Giving the late grant
    # back re-armed the lock with that lease, and a 60 s write hold ended 0.25 s later
    # (found by the duration fuzz test: a 1e-7 s lease's grant, 1 ms late, on a busy machine).
    client = syncprims.connect(proxy.url, timeout=3)
    try:
        rw = client.get_read_write_lock(name)
        lock = rw.write_lock() if side == "write" else rw.read_lock()
        assert lock.try_lock(lease_time=60)
        proxy.latency = 0.15  # each way: the reentrant grant comes 0.3 s after it was asked for
        assert not lock.try_lock(lease_time=0.25)
        proxy.latency = 0.0
        time.sleep(0.5)  # past the late lease, and past any TTL the give-back set from it
        assert lock.get_hold_count() == 1
        assert 55_000 < raw.pttl(name) <= 60_000  # what was left of the 60 s lease
        lock.unlock()
        assert raw.exists(name) == 0
    finally:
        proxy.latency = 0.0
        client.shutdown()


def test_a_permit_that_comes_after_its_lease_is_not_taken(
    proxy: FaultProxy, raw: redis.Redis, name: str
) -> None:
    # The same for a permit-expirable semaphore (chaos campaign: 3 holders of 2 permits
    # after a client paused mid-acquire).
    client = syncprims.connect(proxy.url, timeout=3)
    try:
        sem = client.get_permit_expirable_semaphore(name)
        assert sem.try_set_permits(1)
        proxy.latency = 0.15  # each way: the permit comes 0.3 s after it was asked for
        assert sem.try_acquire(lease_time=0.25) is None
        proxy.latency = 0.0
        assert sem.available_permits() == 1  # given back, not counted as leased
        permit = sem.try_acquire(lease_time=5)  # a timely permit is taken as always
        assert permit is not None
        sem.release(permit)
    finally:
        proxy.latency = 0.0
        client.shutdown()


def test_redlock_grants_that_come_after_the_lease_are_not_taken(
    proxy: FaultProxy, raw: redis.Redis, name: str
) -> None:
    # The same for a RedLock (chaos campaign: a client paused mid-acquire for 3.4 s entered
    # beside the next holder): under the watchdog too, its first lease bounds the attempt.
    others = [RedisServer(), RedisServer()]
    slow = [FaultProxy(s.port) for s in others]
    masters = syncprims.connect_many(
        [proxy.url, *(p.url for p in slow)], timeout=3, lock_watchdog_timeout=0.25
    )
    try:
        lock = syncprims.RedLock(*(m.get_lock(name) for m in masters.clients))
        for p in (proxy, *slow):
            p.latency = 0.15  # every master's grant comes 0.3 s after it was asked for
        assert not lock.try_lock()
        for p in (proxy, *slow):
            p.latency = 0.0
        assert not lock.is_held_by_current_thread()
        assert lock.try_lock(wait_time=5)  # timely grants are taken as always
        lock.unlock()
    finally:
        masters.shutdown()
        for p in slow:
            p.close()
        for server in others:
            server.stop()


async def test_a_late_acquire_reply_never_frees_the_owners_next_hold(
    proxy: FaultProxy, raw: redis.Redis, name: str
) -> None:
    """Found by the chaos campaign's asyncio kind: an acquire runs, its reply is late, the
    caller times out (``maybe_executed``), cleans up (``unlock()`` of what it may hold) and
    takes the lock again; the late reply then reaches the shared connection's reader, whose
    undo (``on_abandoned_attempt``) unlocked the owner's field, which was now the *new*
    hold: another task got the lock while this one held it. The next hold takes a new field
    since, so the undo finds nothing of its own to release."""
    client = await aio.connect(proxy.url, **{**FAST, "retry_attempts": 0})
    try:
        lock = client.get_lock(name)
        assert await lock.try_lock(lease_time=30)  # the shared connection is open, the
        await lock.unlock()  # scripts are loaded (a NOSCRIPT would not have run)
        proxy.reply_latency = 0.8  # the acquire runs; its reply comes after the timeout
        with pytest.raises(syncprims.RedisTimeoutError) as info:
            await lock.try_lock(lease_time=30)
        assert info.value.maybe_executed
        proxy.reply_latency = 0.0
        assert raw.hlen(name) == 1  # it ran
        assert await lock.is_held_by_current_thread()
        await lock.unlock()  # the careful caller's cleanup
        assert await lock.try_lock(lease_time=30)  # taken again
        await asyncio.sleep(1.2)  # the late reply came and was undone meanwhile
        assert raw.hlen(name) == 1, "the late reply's undo released the new hold"
        assert await lock.is_held_by_current_thread()
        await lock.unlock()
        assert raw.exists(name) == 0
    finally:
        await client.shutdown()


async def test_a_multi_locks_late_sub_reply_never_frees_its_next_hold(
    proxy: FaultProxy, raw: redis.Redis, redis_server: RedisServer, name: str
) -> None:
    """The MultiLock's half of the late-reply race: an attempt's sub-lock acquire runs, its
    reply comes late (after the call timed out, and after the short lease it set ran out),
    and the owner takes the MultiLock again meanwhile, on the same field: the late reply's
    undo then released that *new* hold, and the owner held a MultiLock with a sub-lock
    gone. A sub-lock whose reply is still to come when an acquire ends gives the owner's
    next hold a new field (as an RLock's does), which the undo does not name."""
    direct = await aio.connect(redis_server.url, **FAST)
    behind = await aio.connect(proxy.url, **{**FAST, "retry_attempts": 0})
    try:
        slow = behind.get_lock(f"{name}:b")
        both = aio.MultiLock(direct.get_lock(f"{name}:a"), slow)
        assert await both.try_lock(lease_time=30)  # connections open, scripts loaded
        await both.unlock()
        proxy.reply_latency = 1.5  # b's acquire runs; its reply comes long after
        assert not await both.try_lock(lease_time=0.4)  # one attempt: b timed out
        proxy.reply_latency = 0.0
        deadline = time.monotonic() + 5
        while raw.exists(f"{name}:b") and time.monotonic() < deadline:  # its lease ran out
            await asyncio.sleep(0.02)
        assert await both.try_lock(wait_time=5, lease_time=30)  # taken again
        await asyncio.sleep(1.5)  # the late reply came and its undo ran meanwhile
        assert raw.hlen(f"{name}:b") == 1, "the late reply's undo released the new hold"
        assert await both.is_held_by_current_thread()
        await both.unlock()
        assert raw.exists(f"{name}:a", f"{name}:b") == 0
    finally:
        await direct.shutdown()
        await behind.shutdown()


def test_held_requests_keep_their_stream_order(proxy: FaultProxy) -> None:
    """The proxy's held requests play a partition as TCP does: once a request of a
    connection is held, the later ones wait behind it (a later one answered first would be
    paired with the held one by any client that pipelines: the chaos campaign's 38
    "violations" of the asyncio face on one late delivery were that, not the library)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert sock.recv(64) == b"+PONG\r\n"  # connected through the proxy
        proxy.hold_requests = 1
        sock.sendall(b"*2\r\n$4\r\nECHO\r\n$5\r\nfirst\r\n")
        time.sleep(0.1)  # the proxy reads it as a chunk of its own
        sock.sendall(b"*2\r\n$4\r\nECHO\r\n$6\r\nsecond\r\n")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(64)  # the later request is held behind the first, not answered
        assert proxy.deliver_held() == 2
        sock.settimeout(5)
        replies = b""
        while replies.count(b"\r\n") < 4:
            replies += sock.recv(64)
        assert replies == b"$5\r\nfirst\r\n$6\r\nsecond\r\n"
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert sock.recv(64) == b"+PONG\r\n"  # delivered: the connection flows again
