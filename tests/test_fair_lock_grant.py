"""FairLock: the one-hop grant (``Config.lock_grant_handoff``; docs/grants.md, "The FairLock's
one-hop grant").

A syncprims waiter of a FairLock also registers in ``syncprims_lock_waiters:{name}:fair``
(owner field -> its wait slot and grant registration). A release whose head waiter is
registered and alive makes that waiter's acquisition itself (out of the queue, the deadlines
behind it one slot earlier, its hold written, the grant marker set) and hands it over on the
waiter's own list (the blocking face's direct grant) or its client's grant channel (a
message), instead of publishing ``0`` for the waiter to try again. A head that is not
registered (a Redisson waiter) or whose client is gone is notified as before. On every
backend, both faces; the blocking face both ways.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
import redis

import syncprims
from syncprims._core.lock.grant import Grant
from syncprims._embedded import RedisServer
from syncprims._protocol.names import fair_grant_registry_name, lock_grant_marker_name
from tests import test_lock_grant as _grant_tests
from tests.harness import Face, raw_pubsub, within
from tests.test_fair_lock import _until, queue_key, timeout_key
from tests.test_lock_grant import _connect, _field, _kind, waits_ending_while_granted

# the RLock grant tests' fixtures: how a grant reaches the waiter (direct / message)
delivery = _grant_tests.delivery
_delivery_for_connect = _grant_tests._delivery_for_connect

SLOT_MS = 20_000  # the wait slot of a try_lock(wait_time=20)


def _grant_by_hand(raw: Any, name: str, member: str) -> None:
    """What a release's grant to ``member`` writes (fair_unlock.lua), without its message
    or push."""
    raw.eval(
        """
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], ARGV[2])
        redis.call('hdel', KEYS[4], ARGV[2])
        redis.call('del', KEYS[1])
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], 30000)
        redis.call('set', KEYS[5], ARGV[1], 'px', 30000)
        """,
        5, name, queue_key(name), timeout_key(name), fair_grant_registry_name(name),
        lock_grant_marker_name(name), member, _field(member),
    )  # fmt: skip


def _registrations(raw: Any, name: str) -> dict[str, tuple[int, str]]:
    """The grant registry of ``name``: owner field -> (wait slot ms, registration)."""
    entries: dict[bytes, bytes] = raw.hgetall(fair_grant_registry_name(name))
    found: dict[str, tuple[int, str]] = {}
    for field, value in entries.items():
        slot, member = value.decode().split(" ", 1)
        found[field.decode()] = (int(slot), member)
    return found


async def _registered(raw: Any, name: str, count: int) -> dict[str, tuple[int, str]]:
    await _until(lambda: len(_registrations(raw, name)) >= count)
    return _registrations(raw, name)


async def test_a_release_hands_the_lock_to_the_registered_head(
    face: Face, url: str, name: str, raw: Any, delivery: str
) -> None:
    holder_client, first, second = (
        await _connect(face, url),
        await _connect(face, url),
        await _connect(face, url),
    )
    holder, a, b = face.actor(), face.actor(), face.actor()
    await holder(holder_client.get_fair_lock(name).lock)
    wait_a = asyncio.ensure_future(a(first.get_fair_lock(name).try_lock, wait_time=20))
    [(field_a, (slot_a, member_a))] = (await _registered(raw, name, 1)).items()
    wait_b = asyncio.ensure_future(b(second.get_fair_lock(name).try_lock, wait_time=20))
    registry = await _registered(raw, name, 2)
    await _until(lambda: raw.llen(queue_key(name)) == 2)
    field_b = next(f for f in registry if f != field_a)
    assert slot_a == SLOT_MS and member_a.startswith(_kind(face) + "|")
    assert _field(member_a) == field_a
    assert [f.decode() for f in raw.lrange(queue_key(name), 0, -1)] == [field_a, field_b]
    deadline_b = raw.zscore(timeout_key(name), field_b)
    await holder(holder_client.get_fair_lock(name).unlock)
    # The release made a's acquisition, as fair_acquire.lua would, before a even woke.
    assert raw.hgetall(name) == {field_a.encode(): b"1"}
    assert 20_000 < raw.pttl(name) <= 30_000  # a's lease (the watchdog's 30 s)
    assert raw.get(lock_grant_marker_name(name)) == member_a.encode()
    assert [f.decode() for f in raw.lrange(queue_key(name), 0, -1)] == [field_b]
    assert raw.zscore(timeout_key(name), field_a) is None
    assert raw.zscore(timeout_key(name), field_b) == deadline_b - SLOT_MS
    assert list(_registrations(raw, name)) == [field_b]
    assert await within(10, wait_a)
    assert await a(first.get_fair_lock(name).get_hold_count) == 1
    await asyncio.sleep(0.2)
    assert not wait_b.done()
    await a(first.get_fair_lock(name).unlock)
    assert await within(10, wait_b)
    assert await b(second.get_fair_lock(name).get_hold_count) == 1
    await b(second.get_fair_lock(name).unlock)
    for key in (name, queue_key(name), timeout_key(name), fair_grant_registry_name(name)):
        assert raw.exists(key) == 0, key
    assert raw.exists(lock_grant_marker_name(name)) == 0  # it ends with the hold


@pytest.mark.parametrize("head", ["redisson", "dead client"])
async def test_a_head_that_cannot_be_granted_is_notified(
    face: Face, url: str, name: str, raw: Any, *, delivery: str, head: str
) -> None:
    """A Redisson waiter at the head (no registration), or a registered one whose client
    has no subscriber (it died): the release notifies it with Redisson's ``0`` and writes
    no hold; the syncprims waiter behind it keeps its turn, and gets the lock once the head's
    deadline has passed."""
    holder_client, client = await _connect(face, url), await _connect(face, url)
    holder, waiter = face.actor(), face.actor()
    await holder(holder_client.get_fair_lock(name).lock)
    other = "redisson-client:1" if head == "redisson" else "dead-client:1"
    # Still ahead at the unlock below, also when a loaded host took seconds to get there
    # (with 1.5 s, the release found the head's deadline passed and skipped it: no message).
    head_deadline_ms = int(time.time() * 1000) + 4_000
    raw.rpush(queue_key(name), other)
    raw.zadd(timeout_key(name), {other: head_deadline_ms})
    if head == "dead client":
        registry = fair_grant_registry_name(name)
        raw.hset(registry, other, f"{SLOT_MS} {_kind(face)}|30000|0.0|{other}")
        raw.pexpire(registry, 10_000)
    subscriber = raw_pubsub(raw)
    try:
        subscriber.subscribe(f"redisson_lock__channel:{{{name}}}:{other}")
        confirmed = subscriber.get_message(ignore_subscribe_messages=False, timeout=5)
        assert confirmed is not None
        waiting = asyncio.ensure_future(waiter(client.get_fair_lock(name).try_lock, wait_time=20))
        await _registered(raw, name, 2 if head == "dead client" else 1)
        assert time.time() * 1000 < head_deadline_ms, "the set-up outlasted the head's deadline"
        await holder(holder_client.get_fair_lock(name).unlock)
        message = None
        deadline = time.monotonic() + 5
        while message is None and time.monotonic() < deadline:
            message = subscriber.get_message(ignore_subscribe_messages=True, timeout=0.05)
        assert message is not None and message["data"] == b"0"
        assert raw.hexists(name, other) == 0  # the head was not granted
        assert await within(10, waiting)
        # behind the head, the waiter had its turn only once the head's deadline passed
        assert time.time() * 1000 >= head_deadline_ms
        await waiter(client.get_fair_lock(name).unlock)
    finally:
        subscriber.close()


async def test_a_grant_whose_delivery_was_lost_is_claimed_by_the_next_attempt(
    face: Face, url: str, name: str, raw: Any, delivery: str
) -> None:
    holder_client, client = await _connect(face, url), await _connect(face, url)
    holder, waiter = face.actor(), face.actor()
    await holder(holder_client.get_fair_lock(name).lock, lease_time=60)
    waiting = asyncio.ensure_future(waiter(client.get_fair_lock(name).try_lock, wait_time=20))
    [(_, (_, member))] = (await _registered(raw, name, 1)).items()
    _grant_by_hand(raw, name, member)  # its message or push lost
    assert await within(10, waiting)  # its next re-check (at most a second) claimed it
    lock = client.get_fair_lock(name)
    assert await waiter(lock.get_hold_count) == 1  # counted once
    assert raw.exists(lock_grant_marker_name(name)) == 0
    await waiter(lock.unlock)
    assert raw.exists(name) == 0


async def test_a_grant_for_a_wait_that_ended_is_given_back(
    face: Face, url: str, name: str, raw: Any
) -> None:
    holder_client, client = await _connect(face, url), await _connect(face, url)
    holder, waiter = face.actor(), face.actor()
    await holder(holder_client.get_fair_lock(name).lock)
    # The wait times out; its client's grant channel stays subscribed a moment (lingering).
    assert not await waiter(client.get_fair_lock(name).try_lock, wait_time=0.3)
    assert raw.exists(queue_key(name)) == 0 and _registrations(raw, name) == {}
    # A registration of that client that no wait of it has (as if the wait ended just after
    # a release granted it): a message grant, which the client's reader gives back.
    gone = f"{client.id}:424242"
    raw.rpush(queue_key(name), gone)
    raw.zadd(timeout_key(name), {gone: int(time.time() * 1000) + 60_000})
    raw.hset(fair_grant_registry_name(name), gone, f"{SLOT_MS} g|30000|0.0|{gone}")
    await holder(holder_client.get_fair_lock(name).unlock)
    await _until(lambda: raw.exists(name) == 0)  # granted, then given back by the client
    assert raw.exists(lock_grant_marker_name(name)) == 0
    assert raw.exists(queue_key(name)) == 0
    assert await waiter(client.get_fair_lock(name).try_lock)
    await waiter(client.get_fair_lock(name).unlock)


def test_a_direct_wait_that_gives_up_gives_back_a_grant_made_meanwhile(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release granted the direct wait after its last attempt, as the wait gave up. No
    message tells the reader: the wait's own leave finds its registration gone and gives
    the grant back."""
    name = f"test:{uuid.uuid4().hex[:12]}"
    holder = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    waiter = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    raw: Any = redis.Redis.from_url(redis_server.url)
    leave = Grant.leave_registry

    async def granted_first(self: Any, member: str, direct: bool, wait: float) -> None:
        assert direct and member.startswith("b|")
        _grant_by_hand(raw, name, member)  # between the last attempt and the leave
        await leave(self, member, direct, wait)

    monkeypatch.setattr(Grant, "leave_registry", granted_first)
    try:
        holder.get_fair_lock(name).lock(lease_time=60)
        assert not waiter.get_fair_lock(name).try_lock(wait_time=0.3)
        assert raw.exists(name) == 0  # given back
        assert raw.exists(lock_grant_marker_name(name)) == 0
        assert raw.exists(queue_key(name)) == 0
        assert holder.get_fair_lock(name).try_lock()
        holder.get_fair_lock(name).unlock()
    finally:
        holder.shutdown()
        waiter.shutdown()
        raw.close()


def test_a_wait_that_does_not_register_drops_a_stale_registration(
    redis_server: RedisServer,
) -> None:
    """An owner's registration left from an earlier wait (its leave failed) must not be
    granted to the owner's next wait that does not register (a lease under 2 s): that wait
    would find the hold already there and count it twice. Its enqueue drops the entry; the
    release then notifies it, and it holds the lock once."""
    name = f"test:{uuid.uuid4().hex[:12]}"
    holder = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    waiter = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    raw: Any = redis.Redis.from_url(redis_server.url)
    registry = fair_grant_registry_name(name)
    counts: list[int] = []
    stale_written = threading.Event()

    def wait() -> None:
        field = f"{waiter.id}:{threading.get_ident()}"
        raw.hset(registry, field, f"{SLOT_MS} b|30000|999.0|{field}")
        stale_written.set()
        lock = waiter.get_fair_lock(name)
        if lock.try_lock(wait_time=20, lease_time=1.5):
            counts.append(lock.get_hold_count())
            lock.unlock()

    try:
        holder.get_fair_lock(name).lock()
        thread = threading.Thread(target=wait)
        thread.start()
        assert stale_written.wait(10)
        deadline = time.monotonic() + 10
        while raw.llen(queue_key(name)) < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert raw.llen(queue_key(name)) == 1
        assert raw.hlen(registry) == 0  # dropped by the enqueue
        holder.get_fair_lock(name).unlock()
        thread.join(10)
        assert counts == [1]
        assert raw.exists(name) == 0
    finally:
        holder.shutdown()
        waiter.shutdown()
        raw.close()


def test_waits_that_end_while_grants_are_in_flight_keep_exclusion_and_order(
    redis_server: RedisServer,
) -> None:
    """Many short waits end while releases grant them the lock: every grant is either taken
    or given back. Exclusion holds, every update is kept, the queue and the registry end
    empty and the lock free."""

    def empty(raw: Any, name: str) -> None:
        assert raw.exists(queue_key(name)) == 0
        assert raw.hlen(fair_grant_registry_name(name)) == 0

    waits_ending_while_granted(
        redis_server.url, lambda client, name: client.get_fair_lock(name), empty
    )
