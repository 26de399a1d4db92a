"""SpinLock: what differs from an RLock (the generic lock tests in test_lock.py run on it too)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from syncprims._core.spin import BackOff
from tests.harness import Face, raw_pubsub, raw_redis, within


def test_backoff_is_redissons_exponential_backoff() -> None:
    """1 ms, then x2 plus a jitter of up to ``attempts - 1`` ms, capped at 128 ms."""
    delays = BackOff().delays(random.Random(7))
    pauses = [round(next(delays) * 1000, 6) for _ in range(12)]
    assert pauses[:2] == [1, 2]
    for previous, pause, fails in zip(pauses, pauses[1:], range(1, 12), strict=False):
        if previous < 128:
            assert min(128, previous * 2) <= pause <= min(128, previous * 2 + fails - 1)
    assert pauses[-4:] == [128] * 4
    assert pauses == sorted(pauses)


@pytest.mark.parametrize("kwargs", [{"initial_delay": 0}, {"max_delay": -1.0}, {"multiplier": 0}])
def test_bad_backoff_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        BackOff(**kwargs)


async def test_bad_delay_is_refused_by_the_client(client: Any, name: str) -> None:
    with pytest.raises(ValueError, match="initial_delay must be > 0"):
        client.get_spin_lock(name, initial_delay=0)


async def test_waiters_poll_without_pub_sub(face: Face, url: str, client: Any, name: str) -> None:
    lock = client.get_spin_lock(name, max_delay=0.02)
    a, b = face.actor(), face.actor()
    raw = raw_redis(url)
    subscriber = raw_pubsub(raw)
    subscriber.subscribe(f"redisson_lock__channel:{{{name}}}")
    subscriber.subscribe(f"redisson_lock__channel:{name}")
    try:
        await a(lock.lock)
        waiter = asyncio.ensure_future(b(lock.try_lock, wait_time=20))
        await asyncio.sleep(0.2)
        assert not waiter.done()
        stats = await face.call(lock.statistics)
        assert stats.kind == "spin lock" and stats.waiters == 1
        released = time.monotonic()
        await a(lock.unlock)
        assert await within(10, waiter)
        assert time.monotonic() - released < 1.0  # noticed at the next attempt (<= 20 ms pauses)
        await b(lock.unlock)
        assert await a(lock.force_unlock) is False
        messages: list[Any] = []
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            message = subscriber.get_message(timeout=0.05)
            if message is not None:
                messages.append(message)
        assert messages == []  # unlock publishes nothing
    finally:
        subscriber.close()


async def test_spin_lock_and_rlock_of_one_name_exclude_each_other(
    face: Face, client: Any, name: str
) -> None:
    spin, plain = client.get_spin_lock(name), client.get_lock(name)
    a, b = face.actor(), face.actor()
    await a(spin.lock)
    assert await a(plain.get_hold_count) == 1  # the same hash and field
    assert not await b(plain.try_lock)
    assert not await b(spin.try_lock, wait_time=0.1)
    await a(spin.unlock)
    assert await b(plain.try_lock)
    assert not await a(spin.try_lock, wait_time=0.05)
    await b(plain.unlock)


async def test_try_lock_gives_up_on_time(face: Face, client: Any, name: str) -> None:
    lock = client.get_spin_lock(name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    started = time.monotonic()
    assert not await b(lock.try_lock, wait_time=0.5)
    assert 0.45 <= time.monotonic() - started < 2.0
    assert (await face.call(lock.statistics)).waiters == 0
    await a(lock.unlock)
