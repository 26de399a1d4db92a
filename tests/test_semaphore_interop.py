"""Interop with Redisson's own scripts for the Redisson 4.x semaphore methods (issue 30).

Each ``REDISSON_*`` text below is the Lua that Redisson sends, copied character for character
from ``redisson/src/main/java/org/redisson/RedissonPermitExpirableSemaphore.java`` and
``RedissonSemaphore.java`` (redisson/redisson master, commit 66863978b4a9, 2026-08; the
method is named above each). A test runs it with raw ``EVAL``, with the KEYS and ARGV that
Redisson passes (numbers as decimal text, permit ids as 16 raw bytes, its client clock),
against the same keys as syncprims' methods: what a Java client does, seen by syncprims, and
the reverse.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from syncprims import PermitNotHeldError
from tests.harness import Face, raw_pubsub, sharded_pubsub, within

NEVER = 922337203685477

# RedissonPermitExpirableSemaphore#tryAcquireAsync(List<String> ids, long timeoutDate)
REDISSON_PES_TRY_ACQUIRE = (
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); "
    "if #expiredIds > 0 then "
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); "
    "local value = redis.call('incrby', KEYS[1], #expiredIds); "
    "if tonumber(value) > 0 then "
    "redis.call(ARGV[5], KEYS[3], value); "
    "end;"
    "end; "
    "local value = redis.call('get', KEYS[1]); "
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then "
    "redis.call('decrby', KEYS[1], ARGV[1]); "
    "for i = 6, #ARGV, 1 do "
    "redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); "
    "end; "
    "local ttl = redis.call('pttl', KEYS[1]); "
    "if ttl > 0 then "
    "redis.call('pexpire', KEYS[2], ttl); "
    "end; "
    "return 'OK'; "
    "end; "
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); "
    "if v[1] ~= nil and v[2] ~= ARGV[4] then "
    "return ':' .. tostring(v[2]); "
    "end "
    "return nil;"
)

# RedissonPermitExpirableSemaphore#tryReleaseAsync(List<String> permitsIds)
REDISSON_PES_TRY_RELEASE_LIST = (
    "for i = 4, #ARGV, 1 do "
    "local expire = redis.call('zscore', KEYS[3], ARGV[i]);"
    "if expire== false or tonumber(expire) <= tonumber(ARGV[2]) then "
    "return 0;"
    "end; "
    "end; "
    "local expiredIds = redis.call('zrangebyscore', KEYS[3], 0, ARGV[2], 'limit', 0, -1); "
    "if #expiredIds > 0 then "
    "redis.call('zrem', KEYS[3], unpack(expiredIds)); "
    "local value = redis.call('incrby', KEYS[1], #expiredIds); "
    "if tonumber(value) > 0 then "
    "redis.call(ARGV[3], KEYS[2], value); "
    "end; "
    "end; "
    "local keys = {}; "
    "for i = 4, #ARGV, 1 do "
    "table.insert(keys, ARGV[i]); "
    "end; "
    "local removed = redis.call('zrem', KEYS[3], unpack(keys)); "
    "redis.call('incrby', KEYS[1], removed); "
    "redis.call(ARGV[3], KEYS[2], removed); "
    "return removed;"
)

# RedissonPermitExpirableSemaphore#availablePermitsAsync()
REDISSON_PES_AVAILABLE_PERMITS = (
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); "
    "if #expiredIds > 0 then "
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); "
    "local value = redis.call('incrby', KEYS[1], #expiredIds); "
    "if tonumber(value) > 0 then "
    "redis.call(ARGV[2], KEYS[3], value); "
    "end;"
    "return value; "
    "end; "
    "local ret = redis.call('get', KEYS[1]); "
    "return ret == false and 0 or ret;"
)

# RedissonPermitExpirableSemaphore#getPermitsAsync()
REDISSON_PES_GET_PERMITS = (
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); "
    "if #expiredIds > 0 then "
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); "
    "local value = redis.call('incrby', KEYS[1], #expiredIds); "
    "if tonumber(value) > 0 then "
    "redis.call(ARGV[2], KEYS[3], value); "
    "end;"
    "end; "
    "local available = redis.call('get', KEYS[1]); "
    "if available == false then "
    "return 0 "
    "end;"
    "local acquired = redis.call('zcount', KEYS[2], 0, '+inf'); "
    "if acquired == false then "
    "return tonumber(available) "
    "end;"
    "return tonumber(available) + acquired;"
)

# RedissonPermitExpirableSemaphore#addPermitsAsync(int permits)
REDISSON_PES_ADD_PERMITS = (
    "local value = redis.call('get', KEYS[1]); "
    "if (value == false) then "
    "value = 0;"
    "end;"
    "redis.call('set', KEYS[1], tonumber(value) + tonumber(ARGV[1])); "
    "if tonumber(ARGV[1]) > 0 then "
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); "
    "end;"
)

# RedissonPermitExpirableSemaphore#getLeaseTimeAsync(String permitId)
REDISSON_PES_GET_LEASE_TIME = (
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1); "
    "if #expiredIds > 0 then "
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); "
    "local value = redis.call('incrby', KEYS[1], #expiredIds); "
    "if tonumber(value) > 0 then "
    "redis.call(ARGV[4], KEYS[3], value); "
    "end;"
    "end; "
    "local value = redis.call('zscore', KEYS[2], ARGV[1]); "
    "if (value ~= false) then "
    "return tonumber(value) == tonumber(ARGV[2]) and -1 or tonumber(value) - tonumber(ARGV[3]);"
    "end;"
    "return 0;"
)

# RedissonSemaphore#releaseIfExistsAsync(int permits)
REDISSON_SEM_RELEASE_IF_EXISTS = (
    "if redis.call('exists', KEYS[1]) == 0 then "
    "return 0 "
    "end "
    "local value = redis.call('incrby', KEYS[1], ARGV[1]) "
    "redis.call(ARGV[2], KEYS[2], value) "
    "return 1 "
)

# RedissonSemaphore#trySetPermitsAsync(int permits, Duration timeToLive)
REDISSON_SEM_TRY_SET_PERMITS_TTL = (
    "local value = redis.call('get', KEYS[1]); "
    "if (value == false) then "
    "redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3]); "
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); "
    "return 1;"
    "end;"
    "return 0;"
)


def now_ms() -> int:
    """Java's ``System.currentTimeMillis()``."""
    return int(time.time() * 1000)


class Java:
    """What a Redisson client sends for one semaphore ``name``: its scripts, by raw EVAL."""

    def __init__(self, raw: redis.Redis, name: str) -> None:
        self.raw = raw
        self.name = name
        self.timeouts = f"{{{name}}}:timeout"
        self.channel = f"redisson_sc:{{{name}}}"
        self.publish = "spublish" if sharded_pubsub(raw) else "publish"

    def eval(self, script: str, keys: list[str], *args: Any) -> Any:
        return self.raw.eval(script, len(keys), *keys, *args)

    def try_acquire(self, ids: list[str], lease_ms: int = -1) -> Any:
        """``tryAcquireAsync(ids, timeoutDate)``: ``b'OK'``, ``b':<ms>'`` or ``None``."""
        expiry = NEVER if lease_ms == -1 else now_ms() + lease_ms
        return self.eval(
            REDISSON_PES_TRY_ACQUIRE,
            [self.name, self.timeouts, self.channel],
            len(ids),
            expiry,
            now_ms(),
            NEVER,
            self.publish,
            *(bytes.fromhex(i) for i in ids),
        )

    def try_release(self, ids: list[str]) -> int:
        """``tryRelease(List)``: the number released (0: none)."""
        return int(
            self.eval(
                REDISSON_PES_TRY_RELEASE_LIST,
                [self.name, self.channel, self.timeouts],
                len(ids),
                now_ms(),
                self.publish,
                *(bytes.fromhex(i) for i in ids),
            )
        )

    def available_permits(self) -> int:
        return int(
            self.eval(
                REDISSON_PES_AVAILABLE_PERMITS,
                [self.name, self.timeouts, self.channel],
                now_ms(),
                self.publish,
            )
        )

    def get_permits(self) -> int:
        return int(
            self.eval(
                REDISSON_PES_GET_PERMITS,
                [self.name, self.timeouts, self.channel],
                now_ms(),
                self.publish,
            )
        )

    def add_permits(self, permits: int) -> None:
        self.eval(REDISSON_PES_ADD_PERMITS, [self.name, self.channel], permits, self.publish)

    def get_lease_time(self, permit_id: str) -> int:
        """``getLeaseTime``'s script reply: ms left, -1 (never), 0 (unknown: Java raises)."""
        return int(
            self.eval(
                REDISSON_PES_GET_LEASE_TIME,
                [self.name, self.timeouts, self.channel],
                bytes.fromhex(permit_id),
                NEVER,
                now_ms(),
                self.publish,
            )
        )

    def try_set_permits(self, permits: int, ttl_ms: int) -> bool:
        reply = self.eval(
            REDISSON_SEM_TRY_SET_PERMITS_TTL,
            [self.name, self.channel],
            permits,
            self.publish,
            ttl_ms,
        )
        return bool(reply == 1)

    def release_if_exists(self, permits: int) -> bool:
        reply = self.eval(
            REDISSON_SEM_RELEASE_IF_EXISTS, [self.name, self.channel], permits, self.publish
        )
        return bool(reply == 1)


JAVA_IDS = ["0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210", "ab" * 16]


# -- PermitExpirableSemaphore: Java acquires, syncprims sees and releases ------------------


async def test_java_multi_acquire_is_seen_and_released_by_us(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    java = Java(raw, name)
    a = face.actor()
    assert await a(sem.try_set_permits, 4)
    assert java.try_acquire(JAVA_IDS, lease_ms=60_000) == b"OK"
    assert await a(sem.available_permits) == 1
    assert await a(sem.acquired_permits) == 3
    assert await a(sem.get_permits) == 4
    left = await a(sem.get_lease_time, JAVA_IDS[0])
    assert left is not None and 55 < left <= 60
    # Not enough left for Java's second try: its hint is our earliest lease's expiry.
    ours = await a(sem.acquire_many, 1, lease_time=30)
    reply = java.try_acquire(["cd" * 16, "ef" * 16], lease_ms=1000)
    assert reply is not None and reply.startswith(b":")
    earliest = int(float(reply[1:]))
    score = raw.zscore(java.timeouts, bytes.fromhex(ours[0]))
    assert score is not None and earliest == int(score)
    assert abs(earliest - (now_ms() + 30_000)) < 5_000
    # All or none: one of ours with Java's unknown id releases nothing.
    assert not await a(sem.try_release, [JAVA_IDS[0], "cd" * 16])
    assert await a(sem.acquired_permits) == 4
    await a(sem.release, JAVA_IDS)  # Java's permits, released by us in one call
    await a(sem.release, ours)
    assert await a(sem.available_permits) == 4
    assert raw.zcard(java.timeouts) == 0


async def test_java_never_expiring_permits_and_lease_time(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    java = Java(raw, name)
    a = face.actor()
    await a(sem.try_set_permits, 2)
    assert java.try_acquire(JAVA_IDS[:2]) == b"OK"  # no lease: the NEVER score
    assert await a(sem.get_lease_time, JAVA_IDS[1]) is None
    # Nothing left, and no lease expires by itself: Java's script answers nil.
    assert java.try_acquire([JAVA_IDS[2]]) is None
    assert await a(sem.try_acquire_many, 1) is None
    assert java.try_release(JAVA_IDS[:2]) == 2
    with pytest.raises(PermitNotHeldError):
        await a(sem.get_lease_time, JAVA_IDS[0])


# -- PermitExpirableSemaphore: syncprims acquires, Java sees and releases ------------------


async def test_our_multi_acquire_is_seen_and_released_by_java(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    java = Java(raw, name)
    a = face.actor()
    await a(sem.try_set_permits, 5)
    ids = await a(sem.acquire_many, 3, lease_time=20)
    forever = await a(sem.try_acquire_many, 1)
    assert java.available_permits() == 1
    assert java.get_permits() == 5
    assert 15_000 < java.get_lease_time(ids[0]) <= 20_000
    assert java.get_lease_time(forever[0]) == -1
    assert java.get_lease_time("00" * 16) == 0  # Java raises IllegalArgumentException
    # Java's tryRelease(List) is all or none too: an unknown id releases nothing.
    assert java.try_release([ids[0], "00" * 16]) == 0
    assert await a(sem.acquired_permits) == 4
    assert java.try_release(ids) == 3
    assert await a(sem.available_permits) == 4
    assert not await a(sem.try_release, ids)  # already released by Java
    assert java.try_release(forever) == 1
    assert java.available_permits() == 5


async def test_java_add_permits_and_list_release_wake_our_waiters(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    java = Java(raw, name)
    a, b = face.actor(), face.actor()
    java.add_permits(2)  # creates the counter, as trySetPermits would
    assert await a(sem.available_permits) == 2
    assert java.try_acquire(JAVA_IDS[:2]) == b"OK"
    waiter = asyncio.ensure_future(b(sem.try_acquire_many, 2, 20))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    released = time.monotonic()
    assert java.try_release(JAVA_IDS[:2]) == 2  # publishes the number released
    ids = await within(10, waiter)
    assert ids is not None and len(ids) == 2
    assert time.monotonic() - released < 2  # woken by Java's message, not the re-check
    waiter = asyncio.ensure_future(b(sem.try_acquire_many, 1, 20))
    await asyncio.sleep(0.3)
    released = time.monotonic()
    java.add_permits(1)  # publishes the number added
    assert await within(10, waiter) is not None
    assert time.monotonic() - released < 2
    java.add_permits(-5)
    assert await a(sem.available_permits) == -5
    assert await a(sem.add_permits, 5) == 0
    assert java.available_permits() == 0


async def test_our_add_permits_and_java_agree_on_the_counter(
    url: str, raw: redis.Redis, name: str
) -> None:
    import syncprims

    java = Java(raw, name)
    java_twin = Java(raw, name + ":java")
    with syncprims.connect(url) as client:
        sem = client.get_permit_expirable_semaphore(name)
        for n in (3, -1, 4, -10):
            sem.add_permits(n)
            java_twin.add_permits(n)
            assert raw.get(name) == raw.get(java_twin.name)
        assert java.available_permits() == sem.available_permits() == -4
        pubsub = raw_pubsub(raw)
        pubsub.subscribe(java.channel)
        confirmed = pubsub.get_message(ignore_subscribe_messages=False, timeout=5)
        assert confirmed is not None  # subscribed before anything is published
        sem.add_permits(2)  # Redisson's message: the number added, only when positive
        sem.add_permits(-1)
        sem.add_permits(3)
        got: list[Any] = []
        deadline = time.monotonic() + 3
        while len(got) < 2 and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.05)
            if message is not None:
                got.append(message["data"])
        pubsub.close()
        assert got == [b"2", b"3"]


# -- Semaphore: trySetPermits(permits, ttl) and releaseIfExists ----------------------------


async def test_java_try_set_permits_with_ttl_and_ours(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_semaphore(name)
    java = Java(raw, name)
    a = face.actor()
    assert java.try_set_permits(3, 10_000)
    assert await a(sem.available_permits) == 3
    ttl = await a(sem.remain_time_to_live)
    assert ttl is not None and 5 < ttl <= 10
    assert not await a(sem.try_set_permits, 5, 60)  # exists: nothing changes
    assert raw.get(name) == b"3" and raw.pttl(name) <= 10_000
    other = Java(raw, name + ":ours")
    ours = client.get_semaphore(other.name)
    assert await a(ours.try_set_permits, 2, 30)
    assert not other.try_set_permits(7, 1000)  # Java sees ours as set
    assert raw.get(other.name) == b"2" and 25_000 < raw.pttl(other.name) <= 30_000


async def test_release_if_exists_both_ways(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_semaphore(name)
    java = Java(raw, name)
    a = face.actor()
    assert not java.release_if_exists(2)
    assert not await a(sem.release_if_exists, 2)
    assert raw.exists(name) == 0  # neither created it
    assert await a(sem.try_set_permits, 1, 60)
    assert java.release_if_exists(2)
    assert await a(sem.available_permits) == 3
    assert await a(sem.release_if_exists)
    assert java.release_if_exists(1)
    assert raw.get(name) == b"5"
    assert 0 < raw.pttl(name) <= 60_000  # the TTL is kept by both
