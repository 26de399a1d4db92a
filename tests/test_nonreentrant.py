"""Non-reentrant locks (issue 30, item 3): Redisson 4.4's ``getNonReentrantLock`` and
``getNonReentrantFairLock``, in both faces, with interop against Redisson's own script."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis

import syncprims
from syncprims import LockReentryError
from syncprims._protocol.names import prefix_name
from tests.harness import Face

KINDS = {
    "plain": lambda client, name: client.get_non_reentrant_lock(name),
    "fair": lambda client, name: client.get_non_reentrant_fair_lock(name),
}

# RedissonNonReentrantLock#tryLockInnerAsync (redisson/redisson master, commit 66863978b4a9,
# 2026-08), character for character.
REDISSON_NR_TRY_LOCK = (
    "if redis.call('exists', KEYS[1]) == 0 then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; "
    "end; "
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "return redis.error_reply(ARGV[3]); "
    "end; "
    "return redis.call('pttl', KEYS[1]);"
)


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_second_acquire_by_the_owner_is_refused_and_changes_nothing(
    face: Face, client: Any, name: str, kind: str, raw: Any
) -> None:
    lock = KINDS[kind](client, name)
    a, b = face.actor(), face.actor()
    await a(lock.lock, 30)
    before = raw.hgetall(name)
    for again in (
        lock.lock,
        lambda: lock.try_lock(5),
        lock.try_lock,
        lambda: lock.acquire(timeout=2),
    ):
        with pytest.raises(LockReentryError) as info:
            await a(again)
        assert info.value.name == name
        assert isinstance(info.value, RuntimeError)
        message = str(info.value)
        assert message.count("non-reentrant") == 1, message
        assert "release it before acquiring it again" in message
    assert raw.hgetall(name) == before  # one hold, count 1
    assert 25_000 < raw.pttl(name) <= 30_000  # the lease was not reset
    assert await a(lock.get_hold_count) == 1
    if kind == "fair":  # the refused owner did not join the queue
        assert raw.llen(prefix_name("redisson_lock_queue", name)) == 0
    # Another owner is excluded as by any lock, and gets it after the single unlock.
    assert not await b(lock.try_lock, 0)
    await a(lock.unlock)
    assert not await a(lock.is_locked)
    assert await b(lock.try_lock, 1)
    await b(lock.unlock)


async def test_a_waiter_gets_it_after_the_one_release(
    face: Face, client: Any, name: str, kind: str
) -> None:
    lock = KINDS[kind](client, name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    waiting = asyncio.ensure_future(b(lock.try_lock, 10))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await a(lock.unlock)
    assert await asyncio.wait_for(waiting, 10)
    with pytest.raises(LockReentryError):
        await b(lock.try_lock, 0)
    await b(lock.unlock)


async def test_an_explicit_owner_is_refused_too(face: Face, client: Any, name: str) -> None:
    lock = client.get_non_reentrant_lock(name)
    job = client.new_owner()
    await face.actor()(lambda: lock.lock(owner=job))
    with pytest.raises(LockReentryError):
        await face.actor()(lambda: lock.try_lock(0, owner=job))
    await face.actor()(lambda: lock.unlock(owner=job))


async def test_redissons_script_and_ours_exclude_each_other(
    face: Face, url: str, client: Any, name: str, raw: Any
) -> None:
    if "cluster" in url or "fake" in url:
        pytest.skip("the raw EVAL runs on one real server")
    lock = client.get_non_reentrant_lock(name)
    java = f"{uuid.uuid4()}:1"
    a = face.actor()
    # A Java client holds it: ours waits, then times out.
    assert raw.eval(REDISSON_NR_TRY_LOCK, 1, name, 30_000, java, "NON_REENTRANT_REACQUIRE") is None
    with pytest.raises(redis.ResponseError, match="NON_REENTRANT_REACQUIRE"):
        raw.eval(REDISSON_NR_TRY_LOCK, 1, name, 30_000, java, "NON_REENTRANT_REACQUIRE")
    assert not await a(lock.try_lock, 0.2)
    raw.delete(name)
    # Ours holds it: the Java client's script waits (its PTTL), and refuses our field's reentry.
    await a(lock.lock)
    field = next(f.decode() for f in raw.hkeys(name))
    ttl = raw.eval(REDISSON_NR_TRY_LOCK, 1, name, 30_000, java, "NON_REENTRANT_REACQUIRE")
    assert isinstance(ttl, int) and ttl > 0
    with pytest.raises(redis.ResponseError, match="NON_REENTRANT_REACQUIRE"):
        raw.eval(REDISSON_NR_TRY_LOCK, 1, name, 30_000, field, "NON_REENTRANT_REACQUIRE")
    await a(lock.unlock)


def test_the_fall_back_to_redissons_scripts_refuses_a_reentry(redis_server: Any) -> None:
    # An ACL written for Redisson's keys: the client runs Redisson's non-reentrant script.
    admin = redis.Redis(port=redis_server.port)
    admin.acl_setuser(
        "nr-redisson-keys", enabled=True, passwords=["+pw"], keys=["nracl:*", "redisson_*"],
        channels=["*"], commands=["+@all"],
    )  # fmt: skip
    user = redis.Redis(port=redis_server.port, username="nr-redisson-keys", password="pw")
    try:
        with syncprims.connect(user) as client:
            for lock in (
                client.get_non_reentrant_lock("nracl:x"),
                client.get_non_reentrant_fair_lock("nracl:y"),
            ):
                assert lock.try_lock(wait_time=1)
                with pytest.raises(LockReentryError):
                    lock.try_lock(wait_time=1)
                assert lock.get_hold_count() == 1
                lock.unlock()
                assert not lock.is_locked()
    finally:
        user.close()
        admin.acl_deluser("nr-redisson-keys")
        admin.close()


async def test_a_multilock_of_non_reentrant_locks_refuses_a_reentry_and_keeps_its_hold(
    face: Face, client: Any, name: str
) -> None:
    multi = client.get_multi_lock(
        client.get_non_reentrant_lock(name + ":1"), client.get_non_reentrant_lock(name + ":2")
    )
    a = face.actor()
    assert await a(multi.try_lock, 1)
    with pytest.raises(LockReentryError):
        await a(multi.try_lock, 1)
    assert await a(multi.is_held_by_current_thread)
    await a(multi.unlock)
    assert not await a(multi.is_locked)


def test_the_kinds_are_in_both_faces() -> None:
    import syncprims.asyncio

    for module in (syncprims, syncprims.asyncio):
        assert {"NonReentrantLock", "NonReentrantFairLock", "LockReentryError"} <= set(
            module.__all__
        )
