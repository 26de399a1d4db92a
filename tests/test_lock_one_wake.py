"""RLock: one wake-up per release among syncprims clients (docs/design.md, "Waking waiters").

A release names the syncprims client that has waited longest (herald channel) and reserves
the free lock for it briefly; other clients' waiters sleep on; a release without a herald
(a Redisson client's) wakes as before; a reservation for a client that is gone runs out.
On every backend (fakeredis, a real server, a cluster), both faces.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import syncprims
from syncprims._core.lock import lock_policy
from syncprims._core.lock.wakeup import (
    ONE_WAKE_RESERVATION_MS,
    ONE_WAKE_SLICE_MS,
    herald_policy,
    one_wake_policy,
)
from syncprims._protocol import scripts
from syncprims._protocol.names import (
    lock_channel,
    lock_reservation_name,
    lock_waiters_name,
)
from syncprims._services import pubsub as pubsub_module
from tests.harness import Face, sharded_pubsub, within


async def _registered(raw: Any, name: str, count: int, timeout: float = 5.0) -> list[bytes]:
    """The waiting clients, once ``count`` have registered."""
    deadline = time.monotonic() + timeout
    while True:
        members: list[bytes] = raw.zrange(lock_waiters_name(name), 0, -1)
        if len(members) >= count or time.monotonic() > deadline:
            return members
        await asyncio.sleep(0.01)


async def test_a_release_wakes_the_longest_waiting_client_only(
    face: Face, url: str, name: str, raw: Any
) -> None:
    holder_client = await face.connect(url)
    first, second = await face.connect(url), await face.connect(url)
    holder = face.actor()
    await holder(holder_client.get_lock(name).lock)
    a, b = face.actor(), face.actor()
    wait_a = asyncio.ensure_future(a(first.get_lock(name).try_lock, wait_time=20))
    assert await _registered(raw, name, 1)
    wait_b = asyncio.ensure_future(b(second.get_lock(name).try_lock, wait_time=20))
    order = await _registered(raw, name, 2)
    assert len(order) == 2  # both registered, the first one first
    await holder(holder_client.get_lock(name).unlock)
    assert await within(10, wait_a)  # the one that waited longest
    await asyncio.sleep(0.3)
    assert not wait_b.done()  # the other slept on: it was not named
    assert await _registered(raw, name, 1) == [order[1]]
    await a(first.get_lock(name).unlock)
    assert await within(10, wait_b)  # named by the next release
    await b(second.get_lock(name).unlock)
    assert raw.exists(lock_waiters_name(name)) == 0


async def test_a_release_by_a_redisson_client_still_wakes_a_waiter(
    face: Face, url: str, name: str, raw: Any
) -> None:
    # A Redisson client's unlock publishes only "0" (no herald): every syncprims client wakes
    # one waiter, as before.
    client = await face.connect(url)
    raw.hset(name, "redisson-client:1", 1)
    raw.pexpire(name, 60_000)
    waiter = face.actor()
    waiting = asyncio.ensure_future(waiter(client.get_lock(name).try_lock, wait_time=20))
    assert await _registered(raw, name, 1)
    await asyncio.sleep(0.2)  # subscribed and asleep (the holder's TTL is 60 s)
    started = time.monotonic()
    raw.evalsha(
        raw.script_load(scripts.LOCK_UNLOCK.source), 3, name, lock_channel(name),
        f"redisson_unlock_latch:{{{name}}}:x", "0", 30_000, "redisson-client:1",
        raw_publish(raw), 10_000,
    )  # fmt: skip
    assert await within(10, waiting)
    assert time.monotonic() - started < 0.9  # woken by the message, not its 1 s re-check
    await waiter(client.get_lock(name).unlock)


def raw_publish(raw: Any) -> str:
    """The publish command syncprims' scripts use through ``raw``'s server(s)."""
    return "SPUBLISH" if sharded_pubsub(raw) else "PUBLISH"


async def test_a_reservation_for_a_client_that_is_gone_runs_out(
    face: Face, client: Any, name: str, raw: Any
) -> None:
    lock = client.get_lock(name)
    actor = face.actor()
    # Ten times the reservation a release makes (ONE_WAKE_RESERVATION_MS): a loaded CI
    # machine took longer than 100 ms between the SET and the first attempt.
    raw.set(lock_reservation_name(name), "gone-client", px=10 * ONE_WAKE_RESERVATION_MS)
    assert not await actor(lock.try_lock)  # reserved for the named client
    started = time.monotonic()
    assert await actor(lock.try_lock, wait_time=5)  # then free for anyone
    assert time.monotonic() - started < 3
    await actor(lock.unlock)


async def test_a_named_client_takes_its_reservation(
    face: Face, client: Any, name: str, raw: Any
) -> None:
    lock = client.get_lock(name)
    actor = face.actor()
    raw.set(lock_reservation_name(name), client.id, px=5_000)
    assert await actor(lock.try_lock)
    assert raw.exists(lock_reservation_name(name)) == 0
    await actor(lock.unlock)


async def test_giving_up_leaves_the_registry(face: Face, url: str, name: str, raw: Any) -> None:
    owner_client, client = await face.connect(url), await face.connect(url)
    owner, waiter = face.actor(), face.actor()
    await owner(owner_client.get_lock(name).lock)
    assert not await waiter(client.get_lock(name).try_lock, wait_time=0.3)
    assert raw.zcard(lock_waiters_name(name)) == 0
    await owner(owner_client.get_lock(name).unlock)
    assert raw.exists(lock_reservation_name(name)) == 0  # nobody was named


class _Entry:
    """A stand-in for a channel's local waiters (Wakeable) in one subscriber table."""

    def __init__(self, table: dict[str, _Entry], channel: str) -> None:
        self.table, self.channel = table, channel
        table[channel] = self
        self.note: bytes | None = None
        self.woken = 0

    def wake(self, n: int) -> None:
        self.woken += n

    def wake_all(self) -> None:
        self.woken += 100

    def tell(self, channel: str, note: bytes) -> None:
        other = self.table.get(channel)
        if other is not None:
            other.note = note

    def take_note(self) -> bytes | None:
        note, self.note = self.note, None
        return note

    def wake_paired(self, channel: str) -> None:
        other = self.table.get(channel)
        if other is not None:
            other.wake_all()


def test_the_wake_rules() -> None:
    table: dict[str, _Entry] = {}
    lock, herald = _Entry(table, "lock"), _Entry(table, "herald")
    mine = one_wake_policy("me")
    herald_rule = herald_policy("lock")
    herald_rule(herald, b"someone-else")
    mine(lock, b"0")
    assert lock.woken == 0  # named another client
    herald_rule(herald, b"me")
    mine(lock, b"0")
    assert lock.woken == 1  # named this client
    mine(lock, b"0")
    assert lock.woken == 2  # no note: a Redisson release wakes one, as always
    herald_rule(herald, b"someone-else")
    lock_policy(lock, b"0")  # the plain rule wakes one and drops the note
    assert lock.woken == 3 and lock.note is None
    mine(lock, b"1")
    assert lock.woken == 103  # "1" wakes everyone


def test_an_acl_for_redissons_keys_falls_back_to_redissons_wake_ups(
    redis_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # An application whose ACL was written for Redisson's keys keeps working after an
    # upgrade: the first NOPERM (nothing ran) switches the client to Redisson's scripts.
    import threading

    import redis

    import syncprims

    admin = redis.Redis(port=redis_server.port)
    admin.acl_setuser(
        "redisson-keys", enabled=True, passwords=["+pw"], keys=["acl1wake:*", "redisson_*"],
        channels=["*"], commands=["+@all"],
    )  # fmt: skip
    users = [redis.Redis(port=redis_server.port, username="redisson-keys", password="pw")
             for _ in range(2)]  # fmt: skip
    try:
        with syncprims.connect(users[0]) as holder, syncprims.connect(users[1]) as waiter:
            lock = holder.get_lock("acl1wake:x")
            assert lock.try_lock(lease_time=30)
            got: list[bool] = []
            thread = threading.Thread(
                target=lambda: got.append(
                    waiter.get_lock("acl1wake:x").try_lock(wait_time=10, lease_time=30)
                )
            )
            thread.start()
            time.sleep(0.3)
            started = time.monotonic()
            lock.unlock()
            thread.join(10)
            assert got == [True]
            assert time.monotonic() - started < 0.9  # woken by Redisson's message
            waiter_lock = waiter.get_lock("acl1wake:x")
            assert waiter_lock.is_locked()
            assert waiter_lock.force_unlock()
        assert "falling back to Redisson's wake-ups" in caplog.text
        assert admin.exists(lock_waiters_name("acl1wake:x")) == 0
    finally:
        for user in users:
            user.close()
        admin.acl_deluser("redisson-keys")
        admin.close()


def test_a_multi_lock_under_an_acl_for_redissons_keys_falls_back(redis_server: Any) -> None:
    import redis

    import syncprims

    admin = redis.Redis(port=redis_server.port)
    admin.acl_setuser(
        "redisson-keys-2", enabled=True, passwords=["+pw"], keys=["acl1wake:*", "redisson_*"],
        channels=["*"], commands=["+@all"],
    )  # fmt: skip
    user = redis.Redis(port=redis_server.port, username="redisson-keys-2", password="pw")
    try:
        with syncprims.connect(user) as client:
            multi = client.get_multi_lock(
                client.get_lock("acl1wake:m1"), client.get_lock("acl1wake:m2")
            )
            assert multi.try_lock(lease_time=30)
            assert admin.exists("acl1wake:m1", "acl1wake:m2") == 2
            multi.unlock()
            assert admin.exists("acl1wake:m1", "acl1wake:m2") == 0
            with pytest.raises(syncprims.ServerReplyError, match="NOPERM"):
                client.get_lock("elsewhere:1").try_lock(lease_time=1)  # a real refusal
            # A wait that runs out under the fallback ends with False, not an error.
            assert multi.try_lock(lease_time=30)
            second = redis.Redis(port=redis_server.port, username="redisson-keys-2", password="pw")
            with syncprims.connect(second) as other:
                assert not other.get_lock("acl1wake:m1").try_lock(wait_time=0.3)
            second.close()
            multi.unlock()
    finally:
        user.close()
        admin.acl_deluser("redisson-keys-2")
        admin.close()


def _parked(client: Any, lock: Any) -> int:
    """How many of ``client``'s waits are blocked on ``lock``'s channel now."""
    entry = client._ex.pubsub.table.entries.get(lock._core.channel)
    return 0 if entry is None else int(entry.latch.waiting())


@pytest.mark.real
def test_a_lingering_subscription_saves_the_attempt_after_subscribing(
    real_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that waited for the lock moments ago still has the channel subscribed: its
    next wait takes that subscription before its first attempt, so a failed attempt is
    followed by the wait itself, not by a second attempt, and the release still wakes it
    (a long re-check interval: a lost wake-up would show as a wait of 30 s). The
    subscription lingers 30 s here, not 1 s: a loaded run spent over a second between the
    two waits, and the second one subscribed again."""
    monkeypatch.setattr(pubsub_module, "LINGER", 30.0)
    raw = redis.Redis.from_url(real_url)
    holder = syncprims.connect(real_url)
    waiter = syncprims.connect(real_url, wait_recheck_interval=30)
    try:
        mine, theirs = holder.get_lock(name), waiter.get_lock(name)
        for lock in (mine, theirs):  # the scripts are loaded: every call is one EVALSHA
            lock.lock()
            lock.unlock()

        def one_wait() -> tuple[int, float]:
            mine.lock()
            got: list[float] = []
            before = _evalsha_calls(raw)

            def take() -> None:
                got.append(_timed(theirs.lock))
                theirs.unlock()

            t = threading.Thread(target=take)
            t.start()
            deadline = time.monotonic() + 10
            while not _parked(waiter, theirs) and time.monotonic() < deadline:
                time.sleep(0.005)  # its attempt(s) ran: it waits now (a loaded host took
            assert _parked(waiter, theirs), "the waiter never waited"  # over 0.2 s)
            mine.unlock()
            t.join(10)
            assert got, "the waiter never got the lock"
            return _evalsha_calls(raw) - before, got[0]  # its attempts and both unlocks

        first_calls, _ = one_wait()  # attempt, subscribe, attempt, wait, attempt, unlock
        second_calls, took = one_wait()  # lingering: attempt, wait, attempt, unlock
        assert second_calls == first_calls - 1
        assert took < 5  # woken by the release, not by the 30 s re-check
    finally:
        holder.shutdown()
        waiter.shutdown()
        raw.close()


@pytest.mark.real
@pytest.mark.parametrize("lease_time", [None, 1.0], ids=["grant-wait", "one-wake-wait"])
def test_a_free_lock_costs_one_attempt_and_a_cold_wait_no_more(
    real_url: str, name: str, lease_time: float | None
) -> None:
    """``lock()`` on a free lock is one script and subscribes to nothing (its plain first
    attempt sets up no wait). A wait with nothing subscribed goes on from that attempt:
    one more attempt once subscribed, then the wait; no round trip more than without the
    plain first attempt. The release wakes it (a lost wake-up would wait 30 s)."""
    raw = redis.Redis.from_url(real_url)
    holder = syncprims.connect(real_url)
    waiter = syncprims.connect(real_url, wait_recheck_interval=30)
    channel = lock_channel(name)
    try:
        mine, theirs = holder.get_lock(name), waiter.get_lock(name)
        for lock in (mine, theirs):  # the scripts are loaded: every call is one EVALSHA
            lock.lock(lease_time=lease_time)
            lock.unlock()
        before = _evalsha_calls(raw)
        theirs.lock(lease_time=lease_time)
        assert _evalsha_calls(raw) - before == 1
        assert raw.pubsub_numsub(channel) == [(channel.encode(), 0)]
        theirs.unlock()

        mine.lock(lease_time=30)
        before = _evalsha_calls(raw)
        got: list[float] = []

        def take() -> None:
            got.append(_timed(lambda: theirs.lock(lease_time=lease_time)))
            theirs.unlock()

        t = threading.Thread(target=take)
        t.start()
        deadline = time.monotonic() + 10
        while raw.pubsub_numsub(channel) != [(channel.encode(), 1)]:
            assert time.monotonic() < deadline, "the waiter never subscribed"
            time.sleep(0.005)
        time.sleep(0.3)  # its attempts ran: it waits now
        assert _evalsha_calls(raw) - before == 2  # the plain attempt, one once subscribed
        mine.unlock()
        t.join(10)
        assert got and got[0] < 5
    finally:
        holder.shutdown()
        waiter.shutdown()
        raw.close()


def _evalsha_calls(raw: redis.Redis) -> int:
    stats: dict[str, Any] = raw.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def _timed(fn: Callable[[], object]) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


async def test_a_registered_waiter_notices_a_plain_delete_within_its_slice(
    face: Face, url: str, name: str, raw: Any
) -> None:
    """The path behind "a waiter noticed a ``DEL`` after 0.48 s" (issue 29): a waiter
    registered for the one wake-up attempts at least every ``ONE_WAKE_SLICE_MS`` (1 s) to
    renew its registration, so a release that published nothing is noticed within a slice,
    not after ``wait_recheck_interval`` (a minute here)."""
    holder_client = await face.connect(url)
    client = await face.connect(url, wait_recheck_interval=60)
    holder = face.actor()
    await holder(holder_client.get_lock(name).lock, lease_time=60)
    waiter = face.actor()
    waiting = asyncio.ensure_future(waiter(client.get_lock(name).try_lock, wait_time=30))
    assert await _registered(raw, name, 1)
    await asyncio.sleep(0.2)
    deleted = time.monotonic()
    raw.delete(name)  # no message: a misbehaving client's release
    assert await within(10, waiting)
    assert time.monotonic() - deleted < ONE_WAKE_SLICE_MS / 1000 + 2.0  # not 60 s
    await waiter(client.get_lock(name).unlock)
