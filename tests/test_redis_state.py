"""What RLock leaves in Redis matches Redisson's layout (redisson-spec.md 2 and 15).

A Java Redisson client and syncprims must exclude each other on the same name: same hash,
same owner field shape, same TTL, same channel, same message.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import redis

import syncprims
from tests.harness import Face, RawSubscriber, raw_pubsub, within


def _next_message(pubsub: RawSubscriber, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message: dict[str, Any] | None = pubsub.get_message(
            ignore_subscribe_messages=True, timeout=0.05
        )
        if message is not None:
            return message
    return None


def test_hash_field_ttl_and_hold_count(url: str, raw: redis.Redis, name: str) -> None:
    with syncprims.connect(url) as client:
        lock = client.get_lock(name)
        lock.lock()
        lock.lock()
        field = f"{client.id}:{threading.get_ident()}"
        assert raw.type(name) == b"hash"
        assert raw.hgetall(name) == {field.encode(): b"2"}
        assert 29_000 < raw.pttl(name) <= 30_000  # the watchdog lease, in ms
        lock.unlock()
        assert raw.hgetall(name) == {field.encode(): b"1"}
        lock.unlock()
        assert raw.exists(name) == 0


def test_explicit_lease_sets_the_ttl(url: str, raw: redis.Redis, name: str) -> None:
    with syncprims.connect(url) as client:
        client.get_lock(name).lock(lease_time=12.5)
        assert 12_000 < raw.pttl(name) <= 12_500


def test_unlock_publishes_0_on_the_redisson_channel(url: str, raw: redis.Redis) -> None:
    name = "{tag}:x"  # a name with a hash tag keeps it (and the channel keeps it too)
    pubsub = raw_pubsub(raw)
    pubsub.subscribe("redisson_lock__channel:{tag}:x")
    assert _next_message(pubsub, 0.2) is None
    with syncprims.connect(url) as client:
        lock = client.get_lock(name)
        lock.lock()
        lock.lock()
        lock.unlock()
        assert _next_message(pubsub, 0.3) is None  # still held: nothing published
        lock.unlock()
        message = _next_message(pubsub, 3)
        assert message is not None
        assert message["channel"] == b"redisson_lock__channel:{tag}:x"
        assert message["data"] == b"0"
        lock.lock()
        assert lock.force_unlock()
        message = _next_message(pubsub, 3)
        assert message is not None and message["data"] == b"0"
    pubsub.close()


def test_unlock_keys_are_cleaned_up(url: str, raw: redis.Redis, name: str) -> None:
    with syncprims.connect(url) as client:
        lock = client.get_lock(name)
        for _ in range(20):
            lock.lock()
            lock.unlock()
        deadline = time.monotonic() + 3
        pattern = f"redisson_unlock_latch:{{{name}}}:*"
        while raw.keys(pattern) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert raw.keys(pattern) == []


def test_unlock_is_idempotent_per_request_id(url: str, raw: redis.Redis, name: str) -> None:
    # A retried unlock (same request id) must not release a second hold.
    from syncprims._protocol import scripts

    field = "5f0e1c3a-0000-4000-8000-000000000000:1"
    raw.hset(name, field, 2)
    raw.pexpire(name, 30_000)
    latch = f"redisson_unlock_latch:{{{name}}}:{'ab' * 16}"
    args: list[str | int] = ["0", 30_000, field, "PUBLISH", 10_000]
    keys = [name, f"redisson_lock__channel:{{{name}}}", latch]
    first = raw.eval(scripts.LOCK_UNLOCK.source, 3, *keys, *args)
    again = raw.eval(scripts.LOCK_UNLOCK.source, 3, *keys, *args)
    assert first == again == 0
    assert raw.hget(name, field) == b"1"
    assert 0 < raw.pttl(latch) <= 10_000


async def test_a_java_holder_excludes_us_and_its_unlock_wakes_us(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    java_owner = "0d9a4f7e-9f1c-4b8e-a1a5-3c0f5f1d2e77:57"  # "<uuid>:<java thread id>"
    raw.hset(name, java_owner, 1)
    raw.pexpire(name, 30_000)
    lock = client.get_lock(name)
    a = face.actor()
    assert not await a(lock.try_lock)
    waiter = asyncio.ensure_future(a(lock.try_lock, wait_time=20))
    await asyncio.sleep(0.3)
    # Java's unlock: HINCRBY -1 reaches 0, DEL, PUBLISH "0" on the channel.
    raw.delete(name)
    raw.publish(f"redisson_lock__channel:{{{name}}}", "0")
    started = time.monotonic()
    assert await within(10, waiter)
    assert time.monotonic() - started < 5  # woken by the message, not by the 30 s TTL
    assert raw.hget(name, java_owner) is None
    await a(lock.unlock)


def test_we_exclude_a_java_style_acquire(url: str, raw: redis.Redis, name: str) -> None:
    from syncprims._protocol import scripts

    with syncprims.connect(url) as client:
        client.get_lock(name).lock()
        # What a Java client runs to acquire: it is told the remaining TTL, not granted.
        reply = raw.eval(scripts.LOCK_ACQUIRE.source, 1, name, 30_000, "java-uuid:1")
        assert isinstance(reply, int) and 0 < reply <= 30_000
