"""FencedLock: tokens, and fencing a holder paused beyond its lease.

The generic lock behaviour runs on the FencedLock too (tests/test_lock.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import redis

import syncprims
from tests import processes
from tests.harness import Face, raw_redis

# A storage that accepts a write only with a token at least as high as any it has seen.
FENCED_WRITE = """
local last = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[1]) < last then
    return 0
end
redis.call('set', KEYS[2], ARGV[1])
redis.call('set', KEYS[1], ARGV[2])
return 1
"""


async def test_tokens_strictly_increase(face: Face, client: Any, name: str) -> None:
    lock = client.get_fenced_lock(name)
    a, b = face.actor(), face.actor()
    assert await a(lock.get_token) == 0
    first = await a(lock.lock_and_get_token)
    second = await a(lock.try_lock_and_get_token)  # reentrant: a new token too
    assert 0 < first < second
    assert await a(lock.get_token) == second
    assert await b(lock.try_lock_and_get_token) is None  # one attempt, no wait
    await a(lock.unlock)
    await a(lock.unlock)
    third = await b(lock.try_lock_and_get_token, 1, 5)
    assert third is not None and third > second
    assert await b(lock.try_lock)  # plain acquisitions count too
    assert await b(lock.get_token) == third + 1
    await b(lock.unlock)
    await b(lock.unlock)


async def test_durable_tokens_strictly_increase_from_the_servers_clock(
    face: Face, client: Any, raw: Any, name: str
) -> None:
    lock = client.get_fenced_lock(name, durable_tokens=True)
    a, b = face.actor(), face.actor()
    seconds, micros = raw.time()
    floor = seconds * 1_000_000 + micros
    first = await a(lock.lock_and_get_token)
    second = await a(lock.try_lock_and_get_token)  # reentrant: a new token too
    assert floor <= first < second
    await a(lock.unlock)
    await a(lock.unlock)
    raw.set(lock._core.token_key, 5)  # a counter set back (restored, evicted, Redisson's)
    third = await b(lock.lock_and_get_token)
    assert third > second
    assert await b(lock.get_token) == third  # kept in Redisson's layout: an integer
    await b(lock.unlock)
    with pytest.raises(TypeError, match="durable_tokens"):
        client.get_fenced_lock(name, durable_tokens="yes")


async def test_lock_and_get_token_honours_the_lease(face: Face, client: Any, name: str) -> None:
    lock = client.get_fenced_lock(name)
    a = face.actor()
    await a(lock.lock_and_get_token, 0.3)
    ttl = await a(lock.remain_time_to_live)
    assert ttl is not None and ttl <= 0.3


async def test_delete_removes_lock_and_token(face: Face, client: Any, name: str) -> None:
    lock = client.get_fenced_lock(name)
    a = face.actor()
    await a(lock.lock)
    assert await a(lock.delete)
    assert await a(lock.get_token) == 0
    assert not await a(lock.is_locked)


def test_a_paused_holders_stale_write_is_rejected(real_url: str, name: str) -> None:
    holder_code = (
        "import sys, redis, syncprims\n"
        "url, name, script = sys.argv[1], sys.argv[2], sys.argv[3]\n"
        "c = syncprims.connect(url)\n"
        "token = c.get_fenced_lock(name).lock_and_get_token(lease_time=1)\n"
        "print(token, flush=True)\n"
        "sys.stdin.readline()  # frozen here by SIGSTOP, past its lease\n"
        "r = redis.Redis.from_url(url)\n"
        "print(r.eval(script, 2, name + ':data', name + ':fence', token, 'stale'), flush=True)\n"
    )
    with (
        redis.Redis.from_url(real_url) as raw,
        processes.child(
            [sys.executable, "-c", holder_code, real_url, name, FENCED_WRITE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        ) as holder,
    ):
        assert holder.stdin is not None and holder.stdout is not None
        old_token = int(holder.stdout.readline())
        holder.send_signal(signal.SIGSTOP)
        time.sleep(1.3)  # its lease runs out while it is frozen
        with syncprims.connect(real_url) as client:
            lock = client.get_fenced_lock(name)
            new_token = lock.try_lock_and_get_token(wait_time=5, lease_time=10)
            assert new_token is not None and new_token > old_token
            assert (
                raw.eval(FENCED_WRITE, 2, f"{name}:data", f"{name}:fence", new_token, "fresh") == 1
            )
            holder.send_signal(signal.SIGCONT)
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "0"  # the frozen holder's write: rejected
            assert raw.get(f"{name}:data") == b"fresh"
            lock.unlock()


def test_layout(url: str, name: str) -> None:
    raw = raw_redis(url)
    with syncprims.connect(url) as client:
        lock = client.get_fenced_lock(name)
        token = lock.lock_and_get_token()
        assert raw.get(f"redisson_lock_token:{{{name}}}") == str(token).encode()
        assert raw.type(name) == b"hash"
        lock.unlock()
    raw.close()
