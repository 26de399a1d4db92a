"""Redisson 4.x semaphore parity (issue 30), on both faces and every backend.

PermitExpirableSemaphore: ``acquire_many`` / ``try_acquire_many`` (a list of ids, all
permits or none), ``release`` / ``try_release`` of a list (all or none), ``get_permits``,
``add_permits``, ``get_lease_time``. Semaphore: ``try_set_permits(permits, ttl)`` and
``release_if_exists``. Interop with Redisson's own scripts: ``tests/test_semaphore_interop.py``.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta
from typing import Any

import pytest
import redis

from syncprims import PermitNotHeldError
from tests.harness import Face, raw_pubsub, within


def timeouts_key(name: str) -> str:
    return f"{{{name}}}:timeout"


async def test_acquire_many_leases_distinct_ids(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    assert await a(sem.try_set_permits, 5)
    ids = await a(sem.acquire_many, 3, lease_time=30)
    assert isinstance(ids, list) and len(ids) == 3 and len(set(ids)) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", permit) for permit in ids)
    members = set(raw.zrange(timeouts_key(name), 0, -1))
    assert members == {bytes.fromhex(permit) for permit in ids}  # 16 raw bytes each
    assert await a(sem.available_permits) == 2
    assert await a(sem.acquired_permits) == 3
    assert await a(sem.get_permits) == 5
    assert await a(sem.try_acquire_many, 3) is None  # all or none: nothing taken
    assert await a(sem.available_permits) == 2
    more = await a(sem.try_acquire_many, 2, 0, timedelta(seconds=30))
    assert more is not None and len(more) == 2 and not set(more) & set(ids)
    assert await a(sem.available_permits) == 0
    assert await a(sem.try_acquire_many, 0) == []  # nothing asked, nothing sent
    await a(sem.release, ids)
    await a(sem.release, tuple(more))
    assert await a(sem.available_permits) == 5
    assert raw.zcard(timeouts_key(name)) == 0


async def test_single_permit_calls_still_return_one_id(face: Face, client: Any, name: str) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    await a(sem.try_set_permits, 2)
    one = await a(sem.acquire)
    two = await a(sem.try_acquire, None, 10)
    assert isinstance(one, str) and isinstance(two, str)
    await a(sem.release, [one, two])  # ids from single acquires, released together
    assert await a(sem.available_permits) == 2


async def test_try_acquire_many_waits_for_enough_permits(
    face: Face, client: Any, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a, b = face.actor(), face.actor()
    await a(sem.try_set_permits, 3)
    held = await a(sem.acquire_many, 2)
    start = time.monotonic()
    assert await b(sem.try_acquire_many, 2, 0.3) is None  # only one free: times out
    assert 0.3 <= time.monotonic() - start < 2.3
    assert await a(sem.available_permits) == 1  # the waiter took none
    waiter = asyncio.ensure_future(b(sem.try_acquire_many, 2, 20))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    released = time.monotonic()
    await a(sem.release, held)
    got = await within(10, waiter)
    assert got is not None and len(got) == 2
    assert time.monotonic() - released < 2  # woken by the message, not the re-check
    await b(sem.release, got)


async def test_leases_of_many_permits_come_back(face: Face, client: Any, name: str) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    await a(sem.try_set_permits, 2)
    await a(sem.acquire_many, 2, lease_time=0.3)
    start = time.monotonic()
    again = await within(10, a(sem.try_acquire_many, 2, 5))  # waits for the leases
    assert again is not None
    assert 0.1 < time.monotonic() - start < 3
    await a(sem.release, again)


async def test_a_list_is_released_all_or_nothing(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    await a(sem.try_set_permits, 4)
    ids = await a(sem.acquire_many, 3)
    unknown = "00" * 16
    assert not await a(sem.try_release, [ids[0], ids[1], unknown])
    assert await a(sem.acquired_permits) == 3  # nothing released
    with pytest.raises(PermitNotHeldError) as info:
        await a(sem.release, [unknown, ids[2]])
    assert isinstance(info.value, ValueError)
    assert unknown in info.value.permit_id and ids[2] in info.value.permit_id
    assert await a(sem.acquired_permits) == 3
    # An expired id spoils the list too (Redisson: its lease ran out, it is not ours).
    short = await a(sem.acquire, lease_time=0.2)
    await asyncio.sleep(0.4)
    assert not await a(sem.try_release, [ids[0], short])
    assert raw.zscore(timeouts_key(name), bytes.fromhex(ids[0])) is not None
    assert await a(sem.try_release, ids)
    assert await a(sem.available_permits) == 4  # the expired one was reclaimed too
    assert not await a(sem.try_release, ids)  # already released


async def test_get_lease_time(face: Face, client: Any, name: str) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    await a(sem.try_set_permits, 3)
    forever = await a(sem.acquire)
    leased = await a(sem.acquire, lease_time=30)
    short = await a(sem.acquire, lease_time=0.2)
    assert await a(sem.get_lease_time, forever) is None
    left = await a(sem.get_lease_time, leased)
    assert left is not None and 25 < left <= 30
    assert await a(sem.update_lease_time, leased, None)
    assert await a(sem.get_lease_time, leased) is None
    await asyncio.sleep(0.4)
    for gone in (short, "00" * 16):
        with pytest.raises(PermitNotHeldError):
            await a(sem.get_lease_time, gone)
    await a(sem.release, forever)
    with pytest.raises(PermitNotHeldError):
        await a(sem.get_lease_time, forever)


async def test_add_permits_and_get_permits(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a = face.actor()
    assert await a(sem.get_permits) == 0
    assert await a(sem.add_permits, 3) == 3  # creates the counter
    held = await a(sem.acquire)
    assert await a(sem.get_permits) == 3
    assert await a(sem.expire, 60)
    assert await a(sem.add_permits, -2) == 0
    assert await a(sem.get_permits) == 1
    assert raw.pttl(name) > 0  # kept (Redisson's SET drops it)
    assert await a(sem.add_permits, -1) == -1
    assert await a(sem.try_acquire) is None
    await a(sem.release, held)
    assert await a(sem.available_permits) == 0
    assert await a(sem.add_permits, 0) == 0


async def test_add_permits_wakes_waiters(face: Face, client: Any, name: str) -> None:
    sem = client.get_permit_expirable_semaphore(name)
    a, b = face.actor(), face.actor()
    await a(sem.try_set_permits, 0)
    waiter = asyncio.ensure_future(b(sem.try_acquire_many, 2, 20))
    await asyncio.sleep(0.3)
    added = time.monotonic()
    await a(sem.add_permits, 2)
    got = await within(10, waiter)
    assert got is not None and len(got) == 2
    assert time.monotonic() - added < 2


async def test_try_set_permits_with_a_ttl(
    face: Face, client: Any, raw: redis.Redis, name: str
) -> None:
    sem = client.get_semaphore(name)
    a = face.actor()
    pubsub = raw_pubsub(raw)
    pubsub.subscribe(f"redisson_sc:{{{name}}}")
    confirmed = pubsub.get_message(ignore_subscribe_messages=False, timeout=5)
    assert confirmed is not None  # subscribed before anything is published
    assert await a(sem.try_set_permits, 3, 10)
    assert raw.get(name) == b"3"
    assert 5_000 < raw.pttl(name) <= 10_000  # set by the same script
    assert not await a(sem.try_set_permits, 5, timedelta(seconds=60))
    assert raw.get(name) == b"3" and raw.pttl(name) <= 10_000  # unchanged
    got: list[Any] = []
    deadline = time.monotonic() + 3
    while not got and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.05)
        if message is not None:
            got.append(message["data"])
    pubsub.close()
    assert got == [b"3"]
    assert await a(sem.try_acquire, 2)
    assert await a(sem.available_permits) == 1


async def test_release_if_exists(face: Face, client: Any, raw: redis.Redis, name: str) -> None:
    sem = client.get_semaphore(name)
    a = face.actor()
    assert not await a(sem.release_if_exists)
    assert not await a(sem.release_if_exists, 3)
    assert raw.exists(name) == 0  # nothing created
    assert await a(sem.try_set_permits, 0, 60)
    assert not await a(sem.release_if_exists, 0)  # Redisson: false, nothing sent
    assert await a(sem.release_if_exists, 2)
    assert await a(sem.available_permits) == 2
    assert raw.pttl(name) > 0  # the TTL is kept
    await a(sem.delete)
    assert not await a(sem.release_if_exists, 2)
    assert raw.exists(name) == 0


async def test_release_if_exists_wakes_a_waiter(face: Face, client: Any, name: str) -> None:
    sem = client.get_semaphore(name)
    a, b = face.actor(), face.actor()
    await a(sem.try_set_permits, 0)
    waiter = asyncio.ensure_future(b(sem.try_acquire, 1, 20))
    await asyncio.sleep(0.3)
    released = time.monotonic()
    assert await a(sem.release_if_exists)
    assert await within(10, waiter)
    assert time.monotonic() - released < 2


ID = "ab" * 16


@pytest.mark.parametrize(
    ("kind", "call", "args", "error"),
    [
        ("pes", "acquire_many", (-1,), ValueError),
        ("pes", "acquire_many", (1001,), ValueError),
        ("pes", "acquire_many", (1.0,), TypeError),
        ("pes", "acquire_many", (True,), TypeError),
        ("pes", "try_acquire_many", (2, -1), ValueError),
        ("pes", "try_acquire_many", (2, 1, 0), ValueError),
        ("pes", "try_acquire_many", (2, 1, "5"), TypeError),
        ("pes", "try_acquire_many", (0, 1, -1), ValueError),  # checked before the 0 shortcut
        ("pes", "release", ([],), ValueError),
        ("pes", "release", ([ID, ID],), ValueError),
        ("pes", "release", ([ID, "xyz"],), ValueError),
        ("pes", "release", ([ID, 5],), TypeError),
        ("pes", "release", ([ID] * 1001,), ValueError),
        ("pes", "release", (bytes.fromhex(ID),), TypeError),
        ("pes", "release", ({ID},), TypeError),
        ("pes", "try_release", ([],), ValueError),
        ("pes", "add_permits", ("1",), TypeError),
        ("pes", "add_permits", (2**31,), ValueError),
        ("pes", "get_lease_time", (5,), TypeError),
        ("pes", "get_lease_time", ("xyz",), ValueError),
        ("sem", "try_set_permits", (1, 0), ValueError),
        ("sem", "try_set_permits", (1, -5), ValueError),
        ("sem", "try_set_permits", (1, "60"), TypeError),
        ("sem", "try_set_permits", (1, float("inf")), ValueError),
        ("sem", "try_set_permits", (-1, 60), ValueError),
        ("sem", "release_if_exists", (-1,), ValueError),
        ("sem", "release_if_exists", (1.5,), TypeError),
    ],
)
async def test_bad_arguments_send_nothing(
    face: Face,
    client: Any,
    raw: redis.Redis,
    name: str,
    *,
    kind: str,
    call: str,
    args: Any,
    error: Any,
) -> None:
    sem = (
        client.get_permit_expirable_semaphore(name) if kind == "pes" else client.get_semaphore(name)
    )
    with pytest.raises(error):
        await face.actor()(getattr(sem, call), *args)
    assert raw.exists(name) == 0
    assert raw.exists(timeouts_key(name)) == 0


def test_a_cancelled_acquire_many_gives_its_permits_back(real_url: str, name: str) -> None:
    import syncprims.asyncio

    async def main() -> None:
        client = await syncprims.asyncio.connect(real_url)
        sem = client.get_permit_expirable_semaphore(name)
        await sem.try_set_permits(2)
        for delay in (0, 0.0003, 0.001, 0.003, 0.01):
            task = asyncio.ensure_future(sem.try_acquire_many(2, 5, 30))
            await asyncio.sleep(delay)
            task.cancel()
            done = await asyncio.gather(task, return_exceptions=True)
            if isinstance(done[0], list):  # finished before the cancel: ours to release
                await sem.release(done[0])
            await asyncio.sleep(0.3)  # an orphaned acquire's give-back runs in the background
            assert await sem.available_permits() == 2, delay
        await client.shutdown()

    asyncio.run(main())
