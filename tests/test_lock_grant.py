"""RLock: the one-hop grant (``Config.lock_grant_handoff``; docs/grants.md, "The one-hop grant").

A release hands the lock to the syncprims owner that has waited longest: the release script
writes that owner's hold and publishes the grant on the owner's client's grant channel, and
the waiter returns without another script. A grant whose message is lost is claimed by the
waiter's next attempt; a grant for a wait that has ended is given back; a client whose
grant channel has no subscriber (it died) is skipped. On every backend, both faces; the
blocking face both ways: a waiting thread popping its grant from its own list (the direct
grant, ``Config.lock_grant_direct``, the default) and the reader thread's message.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import syncprims
from syncprims._core.lock import grant as grant_module
from syncprims._core.lock import wakeup as wakeup_module
from syncprims._core.lock.clientstate import ClientLocks, client_locks
from syncprims._core.lock.grant import Grant, GrantWait, grant_policy
from syncprims._embedded import RedisServer
from syncprims._protocol.names import (
    lock_channel,
    lock_grant_marker_name,
    lock_handoff_list_prefix,
    lock_waiters_name,
)
from syncprims._transport.compat import PoolExhaustedError, give, take
from syncprims.bench.history import Hold, analyse
from tests.harness import Face, within
from tests.test_lock_one_wake import _Entry, _registered


async def _members(raw: Any, name: str, count: int) -> list[str]:
    """The registrations of waiters for ``name``, once there are ``count``."""
    return [m.decode() for m in await _registered(raw, name, count)]


@pytest.fixture(params=["direct", "message"])
def delivery(request: pytest.FixtureRequest, face: Face) -> str:
    """How a grant reaches its waiter: popped by the waiting thread from its own list, or
    a pub/sub message (the asyncio face's only way)."""
    mode: str = request.param
    if face.is_async and mode == "direct":
        pytest.skip("the asyncio face takes the grant's message (no direct grant)")
    return mode


_DELIVERY = "message"  # set by the autouse fixture below for the test running now


@pytest.fixture(autouse=True)
def _delivery_for_connect(request: pytest.FixtureRequest) -> Iterator[None]:
    global _DELIVERY
    if "delivery" in request.fixturenames:
        _DELIVERY = request.getfixturevalue("delivery")
    try:
        yield
    finally:
        _DELIVERY = "message"


async def _connect(face: Face, url: str, **options: Any) -> Any:
    """A client whose waits may be granted the lock (no replica acknowledgement to wait for:
    the test cluster's masters have replicas, and a grant skips ``WAIT``), delivered as the
    test's ``delivery`` says."""
    return await face.connect(
        url, lock_synced_replicas=0, lock_grant_direct=_DELIVERY == "direct", **options
    )


def _grant_waits(client: Any) -> dict[str, GrantWait]:
    """The client's table of waits that may be granted."""
    return client_locks(client._ex).grant_waits


def _field(member: str) -> str:
    """The owner field a grant registration names (``g|<lease>|<wait id>|<field>``, ``b|``
    for a direct one)."""
    assert member.startswith(("g|", "b|")), member
    return member.split("|", 3)[3]


def _kind(face: Face) -> str:
    """The registration prefix of the test's grant waits."""
    return "b" if _DELIVERY == "direct" and not face.is_async else "g"


def _sole_member(raw: Any, name: str) -> str:
    """The one waiting registration for ``name``, once it is there (10 s at most)."""
    deadline = time.monotonic() + 10
    while not raw.zcard(lock_waiters_name(name)) and time.monotonic() < deadline:
        time.sleep(0.01)
    registered: list[bytes] = raw.zrange(lock_waiters_name(name), 0, -1)
    [member] = [m.decode() for m in registered]
    return member


def _wait_in_thread(client: Any, name: str, result: list[bool]) -> threading.Thread:
    """A started thread that waits up to 20 s for ``name``, records whether it got it, and
    releases it."""

    def wait() -> None:
        lock = client.get_lock(name)
        result.append(lock.try_lock(wait_time=20))
        lock.unlock()

    thread = threading.Thread(target=wait)
    thread.start()
    return thread


async def test_a_release_writes_the_longest_waiting_owners_hold(
    face: Face, url: str, name: str, raw: Any, delivery: str
) -> None:
    holder_client, first, second = (
        await _connect(face, url),
        await _connect(face, url),
        await _connect(face, url),
    )
    holder, a, b = face.actor(), face.actor(), face.actor()
    await holder(holder_client.get_lock(name).lock)
    wait_a = asyncio.ensure_future(a(first.get_lock(name).try_lock, wait_time=20))
    [member_a] = await _members(raw, name, 1)
    wait_b = asyncio.ensure_future(b(second.get_lock(name).try_lock, wait_time=20))
    members = await _members(raw, name, 2)
    assert members[0] == member_a and len(members) == 2
    assert member_a.startswith(_kind(face) + "|")
    await holder(holder_client.get_lock(name).unlock)
    # The release itself wrote a's hold (one hold, a's lease), before a even woke.
    assert raw.hgetall(name) == {_field(member_a).encode(): b"1"}
    assert 20_000 < raw.pttl(name) <= 30_000  # a's lease (30 s), set by the release
    assert raw.get(lock_grant_marker_name(name)) == member_a.encode()
    assert await within(10, wait_a)
    assert await a(first.get_lock(name).get_hold_count) == 1
    await asyncio.sleep(0.2)
    assert not wait_b.done()
    await a(first.get_lock(name).unlock)
    assert await within(10, wait_b)
    assert await b(second.get_lock(name).is_held_by_current_thread)
    await b(second.get_lock(name).unlock)
    assert raw.exists(name) == 0
    assert raw.exists(lock_waiters_name(name)) == 0
    assert raw.exists(lock_grant_marker_name(name)) == 0  # it ends with the hold


async def test_a_grant_whose_message_was_lost_is_claimed_by_the_next_attempt(
    face: Face, url: str, name: str, raw: Any, delivery: str
) -> None:
    holder_client, client = await _connect(face, url), await _connect(face, url)
    holder, waiter = face.actor(), face.actor()
    await holder(holder_client.get_lock(name).lock, lease_time=60)
    waiting = asyncio.ensure_future(waiter(client.get_lock(name).try_lock, wait_time=20))
    [member] = await _members(raw, name, 1)
    # What a release's grant writes, without its message (lost with a dropped connection).
    raw.eval(
        """
        redis.call('del', KEYS[1])
        redis.call('zrem', KEYS[2], ARGV[1])
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], 30000)
        redis.call('set', KEYS[3], ARGV[1], 'px', 30000)
        """,
        3, name, lock_waiters_name(name), lock_grant_marker_name(name), member, _field(member),
    )  # fmt: skip
    assert await within(10, waiting)  # its next re-check (at most a second) claimed it
    lock = client.get_lock(name)
    assert await waiter(lock.get_hold_count) == 1  # counted once
    assert raw.hgetall(name) == {_field(member).encode(): b"1"}
    assert raw.exists(lock_grant_marker_name(name)) == 0
    await waiter(lock.unlock)
    assert raw.exists(name) == 0


async def test_a_grant_for_a_wait_that_ended_is_given_back(
    face: Face, url: str, name: str, raw: Any, delivery: str
) -> None:
    holder_client, client = await _connect(face, url), await _connect(face, url)
    holder, waiter = face.actor(), face.actor()
    await holder(holder_client.get_lock(name).lock)
    # The wait times out; its client's grant channel stays subscribed a moment (lingering).
    assert not await waiter(client.get_lock(name).try_lock, wait_time=0.3)
    assert raw.zcard(lock_waiters_name(name)) == 0  # it left the registry
    # A registration of that client that no wait of it has (as if the wait ended just after
    # a release popped it).
    gone = f"g|30000|0.0|{client.id}:424242"
    raw.zadd(lock_waiters_name(name), {gone: int(time.time() * 1000) + 10_000})
    await holder(holder_client.get_lock(name).unlock)
    deadline = time.monotonic() + 10
    while raw.exists(name) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert raw.exists(name) == 0  # granted, then given back by the client
    assert raw.exists(lock_grant_marker_name(name)) == 0
    assert await waiter(client.get_lock(name).try_lock)


async def test_a_client_without_a_subscriber_is_skipped(
    face: Face, url: str, name: str, raw: Any, delivery: str
) -> None:
    holder_client, client = await _connect(face, url), await _connect(face, url)
    holder, waiter = face.actor(), face.actor()
    await holder(holder_client.get_lock(name).lock)
    waiting = asyncio.ensure_future(waiter(client.get_lock(name).try_lock, wait_time=20))
    [member] = await _members(raw, name, 1)
    # a process that died: nobody subscribes for it
    dead = f"{_kind(face)}|30000|0.0|dead-client:1"
    # first in line: an earlier expiry than the waiter's (registered under 5 s ago + 10 s)
    raw.zadd(lock_waiters_name(name), {dead: int(time.time() * 1000) + 5_000})
    await holder(holder_client.get_lock(name).unlock)
    assert raw.hgetall(name) == {_field(member).encode(): b"1"}
    assert await within(10, waiting)
    assert raw.zcard(lock_waiters_name(name)) == 0
    await waiter(client.get_lock(name).unlock)


async def test_grants_off_or_a_short_lease_register_the_client(
    face: Face, url: str, name: str, raw: Any, delivery: str
) -> None:
    holder_client = await face.connect(url)
    off = await _connect(face, url, lock_grant_handoff=False)
    on = await _connect(face, url)
    holder, a, b = face.actor(), face.actor(), face.actor()
    await holder(holder_client.get_lock(name).lock)
    wait_a = asyncio.ensure_future(a(off.get_lock(name).try_lock, wait_time=20))
    await _members(raw, name, 1)
    wait_b = asyncio.ensure_future(  # an explicit lease under 2 s is not granted
        b(on.get_lock(name).try_lock, wait_time=20, lease_time=1.5)
    )
    members = await _members(raw, name, 2)
    assert members == [off.id, on.id]
    await holder(holder_client.get_lock(name).unlock)
    assert await within(10, wait_a)
    await a(off.get_lock(name).unlock)
    assert await within(10, wait_b)
    await b(on.get_lock(name).unlock)


def waits_ending_while_granted(
    url: str,
    get_lock: Callable[[Any, str], Any],
    check: Callable[[Any, str], None] | None = None,
) -> None:
    """4 clients x 2 threads make short waits on one lock for 4 s (``get_lock(client,
    name)``: the kind), many ending while a release grants them the lock: every grant is
    either taken or given back. Asserts exclusion, every update kept, waits that did end
    early, the lock free at the end and every wait's record dropped; then ``check(raw
    client, name)``, the kind's own checks."""
    name = f"test:{uuid.uuid4().hex[:12]}"
    raw: Any = redis.Redis.from_url(url)
    clients = [syncprims.connect(url, lock_synced_replicas=0) for _ in range(4)]
    holds: list[Hold] = []
    record = threading.Lock()
    timeouts = [0]

    def run(worker: int, thread: int) -> None:
        lock = get_lock(clients[worker], name)
        rng = random.Random(worker * 10 + thread)
        stop = time.monotonic() + 4
        while time.monotonic() < stop:
            if not lock.try_lock(wait_time=rng.choice([0.001, 0.003, 0.01, 0.03, 1.0])):
                with record:
                    timeouts[0] += 1
                continue
            acquired = time.monotonic_ns()
            raw.set(f"{name}:n", int(raw.get(f"{name}:n") or 0) + 1)
            released = time.monotonic_ns()
            lock.unlock()
            with record:
                holds.append(Hold(worker, thread, acquired, released))

    threads = [
        threading.Thread(target=run, args=(w, t), daemon=True) for w in range(4) for t in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    try:
        overlaps, _ = analyse(holds)
        assert overlaps == 0
        assert int(raw.get(f"{name}:n") or 0) == len(holds) > 100
        assert timeouts[0] > 10  # waits did end early (and some of them while granted)
        deadline = time.monotonic() + 5  # grants still in flight are given back
        while raw.exists(name) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert raw.exists(name) == 0
        if check is not None:
            check(raw, name)
        # every wait's record was dropped
        assert [m for client in clients for m in _grant_waits(client)] == []
    finally:
        for client in clients:
            client.shutdown()
        raw.close()


def test_waits_that_end_while_grants_are_in_flight_keep_exclusion(
    redis_server: RedisServer,
) -> None:
    """Many short waits end while releases grant them the lock: every grant is either taken
    or given back. Exclusion holds, every update is kept, and the lock ends free."""
    waits_ending_while_granted(redis_server.url, lambda client, name: client.get_lock(name))


def test_the_grant_rule() -> None:
    table: dict[str, _Entry] = {}
    lock, grants = _Entry(table, "lock"), _Entry(table, "grant")
    given_back: list[str] = []
    client = ClientLocks()
    rule = grant_policy(client, lambda member: "lock", given_back.append)
    wait = GrantWait(30_000, "client:1", 1)
    wait.floor = 12.5
    client.grant_waits[wait.member] = wait
    rule(grants, wait.member.encode())
    assert wait.granted == wait.member and wait.since == 12.5
    assert lock.woken == 100 and given_back == []  # the lock channel's waiters woke
    rule(grants, b"g|30000|0.0|client:2")  # nobody waits for it: given back
    assert given_back == ["g|30000|0.0|client:2"]
    wait.grant_claimed()
    rule(grants, wait.member.encode())  # taken already (by an attempt): given back
    assert given_back[-1] == wait.member
    assert lock.woken == 100


def test_a_long_wait_keeps_one_registration(redis_server: RedisServer) -> None:
    """Each attempt of a wait re-registers it (at least every second); the process keeps a
    record of the registration in use only, not of every attempt's."""
    name = f"test:{uuid.uuid4().hex[:12]}"
    holder = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    waiter = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    raw: Any = redis.Redis.from_url(redis_server.url)
    try:
        holder.get_lock(name).lock()
        result: list[bool] = []
        thread = _wait_in_thread(waiter, name, result)
        time.sleep(3.5)  # three or four attempts, one a second
        mine = list(_grant_waits(waiter))
        assert len(mine) == 1
        registered: list[bytes] = raw.zrange(lock_waiters_name(name), 0, -1)
        assert [m.decode() for m in registered] == mine
        holder.get_lock(name).unlock()
        thread.join(10)
        assert result == [True]
        assert list(_grant_waits(waiter)) == []
    finally:
        holder.shutdown()
        waiter.shutdown()
        raw.close()


def test_a_direct_wait_that_gives_up_gives_back_a_grant_made_meanwhile(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release popped the direct wait's registration and wrote its hold after the wait's
    last attempt, as the wait gave up. No message tells the reader: the wait's own leave
    finds its registration gone and gives the grant back."""
    name = f"test:{uuid.uuid4().hex[:12]}"
    holder = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    waiter = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    raw: Any = redis.Redis.from_url(redis_server.url)
    leave = Grant.leave_registry

    async def granted_first(self: Any, member: str, direct: bool, wait: float) -> None:
        assert direct and member.startswith("b|")
        raw.eval(  # the release's grant, between the last attempt and the leave
            """
            redis.call('del', KEYS[1])
            redis.call('zrem', KEYS[2], ARGV[1])
            redis.call('hset', KEYS[1], ARGV[2], 1)
            redis.call('pexpire', KEYS[1], 30000)
            redis.call('set', KEYS[3], ARGV[1], 'px', 30000)
            """,
            3, name, lock_waiters_name(name), lock_grant_marker_name(name), member,
            _field(member),
        )  # fmt: skip
        await leave(self, member, direct, wait)

    monkeypatch.setattr(Grant, "leave_registry", granted_first)
    try:
        holder.get_lock(name).lock(lease_time=60)
        assert not waiter.get_lock(name).try_lock(wait_time=0.3)
        assert raw.exists(name) == 0  # given back
        assert raw.exists(lock_grant_marker_name(name)) == 0
        assert raw.zcard(lock_waiters_name(name)) == 0
        assert holder.get_lock(name).try_lock()
        holder.get_lock(name).unlock()
    finally:
        holder.shutdown()
        waiter.shutdown()
        raw.close()


def test_a_release_that_grants_nobody_wakes_a_direct_waiter(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread popping its grant list is still woken by the lock channel's "0" (here a
    Redisson client's release): the wake-up pushes a token on its list. Re-checks are a
    minute apart in this test, so only the wake-up can end the wait within 10 s."""
    monkeypatch.setattr(wakeup_module, "ONE_WAKE_SLICE_MS", 60_000)  # the scripts' slice
    monkeypatch.setattr(grant_module, "ONE_WAKE_SLICE_MS", 60_000)  # a grant wait's
    name = f"test:{uuid.uuid4().hex[:12]}"
    waiter = syncprims.connect(redis_server.url, lock_synced_replicas=0, wait_recheck_interval=60)
    raw: Any = redis.Redis.from_url(redis_server.url)
    try:
        raw.hset(name, "redisson-client:1", 1)  # Redisson's hold
        raw.pexpire(name, 60_000)
        result: list[bool] = []
        thread = threading.Thread(
            target=lambda: result.append(waiter.get_lock(name).try_lock(wait_time=30))
        )
        thread.start()
        member = _sole_member(raw, name)
        assert member.startswith("b|")
        time.sleep(0.2)  # blocked in its pop by now (or about to be: a permit is kept)
        raw.delete(name)  # Redisson's unlock: delete, then "0" on the lock channel
        raw.publish(lock_channel(name), 0)
        thread.join(10)
        assert result == [True]
        assert raw.hgetall(name) == {_field(member).encode(): b"1"}
        assert waiter.get_lock(name).force_unlock()  # held by the finished thread
        # the token's list does not outlive its wait for long (a lifetime on every push)
        wait_id = member.split("|")[2].split(".")[0]
        key = f"{lock_handoff_list_prefix(name)}{wait_id}|{_field(member)}"
        assert raw.pttl(key) in (-2, *range(1, 10_001))
    finally:
        waiter.shutdown()
        raw.close()


def test_a_user_who_may_not_pop_gets_grants_by_message(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An ACL without ``+blpop`` (written before the direct grant): the waiter's first pop is
    refused (nothing ran), it waits on its subscription instead and claims its grant there;
    its client's later waits take grants by message."""
    admin: Any = redis.Redis.from_url(redis_server.url)
    admin.acl_setuser(
        "no-pop", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
        commands=["+@all", "-blpop"],
    )  # fmt: skip
    name = f"test:{uuid.uuid4().hex[:12]}"
    url = f"redis://no-pop:pw@127.0.0.1:{redis_server.port}"
    holder = syncprims.connect(url, lock_synced_replicas=0)
    waiter = syncprims.connect(url, lock_synced_replicas=0)
    try:
        for kind in ("b", "g"):  # refused once; by message from then on
            holder.get_lock(name).lock()
            result: list[bool] = []
            thread = _wait_in_thread(waiter, name, result)
            assert _sole_member(admin, name).startswith(kind + "|")
            time.sleep(0.1)
            holder.get_lock(name).unlock()
            thread.join(10)
            assert result == [True]
        assert "may not pop the grant lists" in caplog.text
        assert admin.exists(name) == 0
    finally:
        holder.shutdown()
        waiter.shutdown()
        admin.acl_deluser("no-pop")
        admin.close()


@pytest.mark.parametrize("pool", ["plain", "blocking"])
def test_a_direct_wait_holds_none_of_the_pools_connections(
    redis_server: RedisServer, pool: str
) -> None:
    """A waiting thread pops its grant on a connection of syncprims' own: while it waits,
    syncprims holds none of the application's pooled connections (a plain pool or a
    ``BlockingConnectionPool``, whose size the application waits on)."""
    kind: Any = redis.BlockingConnectionPool if pool == "blocking" else redis.ConnectionPool
    source = kind(port=redis_server.port, max_connections=4)
    name = f"test:{uuid.uuid4().hex[:12]}"
    holder = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    waiter = syncprims.connect(source, lock_synced_replicas=0)
    raw: Any = redis.Redis.from_url(redis_server.url)
    try:
        holder.get_lock(name).lock()
        result: list[bool] = []
        thread = _wait_in_thread(waiter, name, result)
        assert _sole_member(raw, name).startswith("b|")
        transport: Any = waiter._ex.transport
        # The kept connection of the attempt goes back, and the whole pool is free, while
        # the thread waits (its attempt's reply may still be being read when its member is
        # seen: a loaded run found that connection out, and so takes the pool again).
        deadline = time.monotonic() + 5
        while True:
            while transport._idle:
                give(source, transport._idle.pop())
                transport._pooled -= 1
            taken: list[Any] = []
            try:
                taken.extend(take(source) for _ in range(4))
                break
            except PoolExhaustedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            finally:
                for conn in taken:
                    give(source, conn)
        assert not result  # still waiting
        holder.get_lock(name).unlock()
        thread.join(10)
        assert result == [True]
    finally:
        holder.shutdown()
        waiter.shutdown()
        source.disconnect()
        raw.close()


def test_direct_waits_past_the_limit_take_their_grant_by_message(
    redis_server: RedisServer,
) -> None:
    """At most ``lock_grant_direct_limit`` threads of a client pop at once (a connection
    each); the others register message waits, and every one gets the lock."""
    name = f"test:{uuid.uuid4().hex[:12]}"
    holder = syncprims.connect(redis_server.url, lock_synced_replicas=0)
    waiter = syncprims.connect(redis_server.url, lock_synced_replicas=0, lock_grant_direct_limit=2)
    raw: Any = redis.Redis.from_url(redis_server.url)
    try:
        holder.get_lock(name).lock()
        result: list[bool] = []
        threads = [_wait_in_thread(waiter, name, result) for _ in range(5)]
        deadline = time.monotonic() + 10
        while raw.zcard(lock_waiters_name(name)) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        members = [m.decode()[:2] for m in raw.zrange(lock_waiters_name(name), 0, -1)]
        assert sorted(members) == ["b|", "b|", "g|", "g|", "g|"]
        holder.get_lock(name).unlock()
        for thread in threads:
            thread.join(30)
        assert result == [True] * 5
        assert waiter._ex._popping == 0
    finally:
        holder.shutdown()
        waiter.shutdown()
        raw.close()


async def test_a_grant_message_wakes_its_waiter_alone(
    face: Face, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several threads (tasks) of one client wait; a release grants the lock to the one that
    waited longest, and its message wakes that waiter alone: the others run no attempt (no
    herd within the client). Re-checks are a minute apart here, so any script but the
    release's would be a woken waiter's."""
    monkeypatch.setattr(wakeup_module, "ONE_WAKE_SLICE_MS", 60_000)  # the scripts' slice
    monkeypatch.setattr(grant_module, "ONE_WAKE_SLICE_MS", 60_000)  # a grant wait's
    name = f"test:{uuid.uuid4().hex[:12]}"
    raw: Any = redis.Redis.from_url(redis_server.url)
    holder_client = await face.connect(redis_server.url, lock_synced_replicas=0)
    client = await face.connect(
        redis_server.url, lock_synced_replicas=0, lock_grant_direct=False, wait_recheck_interval=60
    )
    holder = face.actor()
    waiters = [face.actor() for _ in range(4)]
    try:
        await holder(holder_client.get_lock(name).lock)
        await holder(holder_client.get_lock(name).unlock)  # its script loaded (no NOSCRIPT)
        await holder(holder_client.get_lock(name).lock)
        waits = []
        for n, waiter in enumerate(waiters):
            waits.append(
                asyncio.ensure_future(waiter(client.get_lock(name).try_lock, wait_time=30))
            )
            await _members(raw, name, n + 1)
        await asyncio.sleep(0.3)  # every waiter blocked by now
        scripts_before = raw.info("commandstats")["cmdstat_evalsha"]["calls"]
        await holder(holder_client.get_lock(name).unlock)
        assert await within(10, waits[0])  # the longest waiting one
        await asyncio.sleep(0.3)
        scripts = raw.info("commandstats")["cmdstat_evalsha"]["calls"] - scripts_before
        assert scripts == 1  # the release alone: no woken waiter ran an attempt
        assert not any(w.done() for w in waits[1:])
        for n, waiter in enumerate(waiters):  # the others in turn, each woken by its grant
            await waiter(client.get_lock(name).unlock)
            if n + 1 < len(waits):
                assert await within(10, waits[n + 1])
        assert raw.exists(name) == 0
    finally:
        raw.close()
