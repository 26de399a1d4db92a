"""FairLock: FIFO order, queue consistency, dead waiters, cancellation and Redis layout.

The generic lock behaviour (reentrancy, leases, watchdog, errors...) runs on the FairLock too,
in tests/test_lock.py.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.process import BaseProcess
from typing import Any

import pytest
import redis

import syncprims
from syncprims import LockNotHeldError
from syncprims._embedded import RedisServer
from syncprims._protocol.names import lock_grant_channel_prefix
from tests import processes
from tests.harness import Face, raw_pubsub, within


def queue_key(name: str) -> str:
    return f"redisson_lock_queue:{{{name}}}"


def timeout_key(name: str) -> str:
    return f"redisson_lock_timeout:{{{name}}}"


async def _until(check: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


async def test_waiters_acquire_in_the_order_they_queued(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    lock = client.get_fair_lock(name)
    holder = face.actor()
    await holder(lock.lock)
    order: list[int] = []

    async def hold_briefly_async(n: int) -> None:
        await lock.lock()
        order.append(n)
        await asyncio.sleep(0.01)
        await lock.unlock()

    def hold_briefly_sync(n: int) -> None:
        lock.lock()
        order.append(n)
        time.sleep(0.01)
        lock.unlock()

    body = hold_briefly_async if face.is_async else hold_briefly_sync
    waiters = []
    for n in range(6):
        waiters.append(asyncio.ensure_future(face.actor()(body, n)))
        await _until(lambda n=n: raw.llen(queue_key(name)) == n + 1)
    await holder(lock.unlock)
    await within(30, asyncio.gather(*waiters))
    assert order == list(range(6))
    assert raw.llen(queue_key(name)) == 0
    assert raw.zcard(timeout_key(name)) == 0


def _queued_process(url: str, name: str, n: int, out: Any) -> None:
    with syncprims.connect(url) as client:
        lock = client.get_fair_lock(name)
        lock.lock()
        out.put((n, time.monotonic_ns()))
        time.sleep(0.01)
        lock.unlock()


def test_processes_acquire_in_the_order_they_queued(real_url: str, name: str) -> None:
    raw = redis.Redis.from_url(real_url)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with syncprims.connect(real_url) as client:
        lock = client.get_fair_lock(name)
        lock.lock()
        procs: list[BaseProcess] = []
        with processes.ending(procs):
            for n in range(4):
                p = ctx.Process(target=_queued_process, args=(real_url, name, n, out))
                p.start()
                procs.append(p)
                deadline = time.monotonic() + 30
                while raw.llen(queue_key(name)) < n + 1:
                    assert time.monotonic() < deadline, "a process did not queue"
                    time.sleep(0.01)
            lock.unlock()
            got = sorted((out.get(timeout=30) for _ in procs), key=lambda item: item[1])
            for proc in procs:
                proc.join(10)
    assert [n for n, _ in got] == [0, 1, 2, 3]
    raw.close()


async def test_timed_out_waiters_leave_the_queue_consistent(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    lock = client.get_fair_lock(name)
    holder = face.actor()
    await holder(lock.lock, lease_time=30)
    # A waits 20 s, B gives up after 0.6 s, C waits 20 s: B leaves, C's deadline moves earlier.
    a_actor = face.actor()
    a = asyncio.ensure_future(a_actor(lock.try_lock, wait_time=20))
    await _until(lambda: raw.llen(queue_key(name)) == 1)
    b = asyncio.ensure_future(face.actor()(lock.try_lock, wait_time=0.6))
    await _until(lambda: raw.llen(queue_key(name)) == 2)
    c_actor = face.actor()
    c = asyncio.ensure_future(c_actor(lock.try_lock, wait_time=20))
    await _until(lambda: raw.llen(queue_key(name)) == 3)
    queue = raw.lrange(queue_key(name), 0, -1)
    before = raw.zscore(timeout_key(name), queue[2])
    assert before is not None
    assert not await within(10, b)
    assert raw.lrange(queue_key(name), 0, -1) == [queue[0], queue[2]]
    assert raw.zcard(timeout_key(name)) == 2
    after = raw.zscore(timeout_key(name), queue[2])
    assert after is not None
    assert before - after == pytest.approx(600, abs=1)  # one slot of the leaver (0.6 s)
    await holder(lock.unlock)
    assert await within(10, a)
    assert raw.llen(queue_key(name)) == 1  # only C is left
    assert not c.done()
    await a_actor(lock.unlock)
    assert await within(10, c)
    await c_actor(lock.unlock)
    assert raw.llen(queue_key(name)) == 0
    assert raw.zcard(timeout_key(name)) == 0


async def test_a_cancelled_waiter_leaves_the_queue(real_url: str, name: str) -> None:
    import syncprims.asyncio

    raw = redis.Redis.from_url(real_url)
    client = await syncprims.asyncio.connect(real_url)
    lock = client.get_fair_lock(name)
    await lock.lock()

    async def wait_for_it() -> None:
        await lock.lock()

    waiter = asyncio.ensure_future(wait_for_it())
    await _until(lambda: raw.llen(queue_key(name)) == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await _until(lambda: raw.llen(queue_key(name)) == 0)
    assert raw.zcard(timeout_key(name)) == 0
    await lock.unlock()
    await client.shutdown()
    raw.close()


def test_a_dead_waiter_delays_the_queue_by_at_most_its_slot(real_url: str, name: str) -> None:
    slot = 1.0
    raw = redis.Redis.from_url(real_url)
    # The waiter starts (imports, connects) before the lock is taken, and queues only when
    # told: a loaded machine once took longer than the 0.5 s lease to start it, and it took
    # the free lock instead of queueing.
    code = (
        "import sys, syncprims\n"
        "c = syncprims.connect(sys.argv[1], fair_lock_wait_timeout=float(sys.argv[3]))\n"
        "lock = c.get_fair_lock(sys.argv[2])\n"
        "print(c.id, flush=True)\n"
        "sys.stdin.readline()\n"
        "lock.lock()\n"
    )
    with syncprims.connect(real_url, fair_lock_wait_timeout=slot) as client:
        lock = client.get_fair_lock(name)
        with processes.child(
            [sys.executable, "-c", code, real_url, name, str(slot)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        ) as doomed:
            assert doomed.stdin is not None and doomed.stdout is not None
            child_id = doomed.stdout.readline().strip()
            assert child_id
            lock.lock(lease_time=0.5)  # the dead waiter's deadline: now + 0.5 s + its 1 s slot
            doomed.stdin.write("go\n")
            doomed.stdin.flush()
            deadline = time.monotonic() + 30
            while raw.llen(queue_key(name)) < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            dead_deadline_ms = raw.zscore(timeout_key(name), raw.lindex(queue_key(name), 0) or "")
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
        # Dead to Redis: its connections closed (a release in the moment before Redis reads
        # their end sees a live, stopped waiter and grants it the lock for its lease, as
        # docs/fair-lock.md says; the kernel closed them, Redis reads that on its next turn).
        grant_channel = lock_grant_channel_prefix(name) + child_id
        deadline = time.monotonic() + 10
        while raw.pubsub_numsub(grant_channel)[0][1] > 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        lock.unlock()
        start = time.monotonic()
        assert lock.try_lock(wait_time=10)  # queued behind the dead waiter
        waited = time.monotonic() - start
        assert dead_deadline_ms is not None
        left_of_slot = dead_deadline_ms / 1000 - time.time() + waited
        assert waited <= max(left_of_slot, 0) + 0.5  # purged at its deadline (+ back-off)
        assert waited <= 0.5 + slot + 0.5
        lock.unlock()
    assert raw.llen(queue_key(name)) == 0
    raw.close()


def test_layout_and_messages_match_redisson(url: str, raw: redis.Redis, name: str) -> None:
    # Redisson's messages: without the one-hop grant (with it, the release grants a
    # registered syncprims head instead of notifying it: tests/test_fair_lock_grant.py)
    with syncprims.connect(url, lock_grant_handoff=False) as client:
        lock = client.get_fair_lock(name)
        lock.lock()
        me = f"{client.id}:{threading.get_ident()}"
        assert raw.hgetall(name) == {me.encode(): b"1"}
        waiting: list[bool] = []
        waiter = threading.Thread(target=lambda: waiting.append(lock.try_lock(wait_time=20)))
        waiter.start()
        deadline = time.monotonic() + 10
        while raw.llen(queue_key(name)) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        head_value = raw.lindex(queue_key(name), 0)
        assert isinstance(head_value, bytes)
        head = head_value.decode()
        assert head.startswith(client.id)
        score = raw.zscore(timeout_key(name), head)
        assert score is not None
        # deadline = now + holder's TTL (up to the 30 s watchdog) + the waiter's slot (20 s)
        assert 20_000 < score - time.time() * 1000 <= 50_500
        pubsub = raw_pubsub(raw)
        channel = f"redisson_lock__channel:{{{name}}}:{head}"
        pubsub.subscribe(channel)
        confirmed = pubsub.get_message(ignore_subscribe_messages=False, timeout=5)
        assert confirmed is not None and confirmed["type"] in ("subscribe", "ssubscribe")
        lock.unlock()
        waiter.join(10)
        assert waiting == [True]
        messages: list[dict[str, Any]] = []
        deadline = time.monotonic() + 3
        while not messages and time.monotonic() < deadline:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
            if message is not None:
                messages.append(message)
        assert messages and messages[0]["data"] == b"0"
        pubsub.close()
        assert raw.llen(queue_key(name)) == 0
        assert raw.zcard(timeout_key(name)) == 0


async def test_unlock_of_an_expired_fair_lock_raises_and_wakes_the_head(
    face: Face, url: str, raw: redis.Redis, name: str
) -> None:
    # Decided by the order of events, not by the machine's speed: a's lease lasts until the
    # head has queued (a 0.3 s lease could run out first on a busy machine, and the head then
    # took the free lock without queueing), and then ends in Redis at once, which publishes
    # nothing. The head re-checks neither for 60 s nor before its 20 s wait ends: it gets in
    # within 10 s through the unlock's wake-up, or through an attempt it had in flight when
    # the lease ended (e.g. the one after its grant subscription is confirmed).
    client = await face.connect(url, wait_recheck_interval=60)
    lock = client.get_fair_lock(name)
    a, b = face.actor(), face.actor()
    await a(lock.lock, lease_time=30)
    (a_field,) = raw.hkeys(name)
    waiter = asyncio.ensure_future(b(lock.try_lock, wait_time=20, lease_time=30))
    await _until(lambda: raw.llen(queue_key(name)) == 1)
    raw.pexpire(name, 1)  # a's lease runs out
    await _until(lambda: not raw.hexists(name, a_field))
    with pytest.raises(LockNotHeldError):
        await a(lock.unlock)
    assert await within(10, waiter)
    await b(lock.unlock)


async def test_delete_removes_the_three_keys(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    lock = client.get_fair_lock(name)
    a = face.actor()
    await a(lock.lock)
    waiter = asyncio.ensure_future(face.actor()(lock.try_lock, wait_time=0.8))
    await _until(lambda: raw.llen(queue_key(name)) == 1)
    assert await a(lock.expire, 60)
    assert 0 < raw.pttl(queue_key(name)) <= 60_000
    assert await a(lock.delete)
    # The queue and the deadlines are gone; the lock itself is free, so the waiter may take
    # it at once (it finds no queue, so it acquires instead of queueing again).
    assert raw.exists(queue_key(name), timeout_key(name)) == 0
    assert await within(10, waiter)
    assert raw.exists(queue_key(name), timeout_key(name)) == 0


def test_demo_fair_reports_fifo(redis_server: RedisServer) -> None:
    from syncprims.cli.demo import run_demo

    result = run_demo(redis_server.url, primitive="fair", processes=2, threads=2, seconds=2)
    assert result.ok
    assert result.fifo_fraction is not None
    assert result.fifo_fraction > 0.9
