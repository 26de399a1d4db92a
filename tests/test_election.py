"""LeaderElection: one leader at a time, terms, hand-over, revocation, observers (issue 42).

Both faces, every backend (fakeredis, a real server, a cluster), and a Sentinel group; the
chaos test of its own is ``tests/test_election_chaos.py``.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

import syncprims
import syncprims.asyncio
from syncprims import Leader, LossReason, fencing
from syncprims._embedded import RedisServer
from syncprims._protocol.stepping import run as drive
from tests.harness import Face, raw_redis, within
from tests.server_groups import SentinelSet

LEASE = 1.5  # seconds: renewed every 0.5 s


class Calls:
    """What ``on_elected`` / ``on_revoked`` were called with (from any thread)."""

    def __init__(self) -> None:
        self.elected: list[int] = []
        self.revoked: list[LossReason | None] = []

    def on_elected(self, term: int) -> None:
        self.elected.append(term)

    def on_revoked(self, reason: LossReason | None) -> None:
        self.revoked.append(reason)

    async def wait_revoked(self, count: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while len(self.revoked) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


def candidate(client: Any, name: str, value: str, calls: Calls | None = None, **kw: Any) -> Any:
    if calls is not None:
        kw.update(on_elected=calls.on_elected, on_revoked=calls.on_revoked)
    return client.get_leader_election(name, value=value, **kw)


async def queued(raw: Any, election: Any, count: int) -> None:
    """Wait until ``count`` candidates are in the election lock's queue."""
    queue = election._core.lock.queue
    deadline = time.monotonic() + 5
    while raw.llen(queue) < count:
        assert time.monotonic() < deadline, f"{count} candidates never queued"
        await asyncio.sleep(0.01)


async def test_one_leader_terms_and_leader(face: Face, client: Any, name: str) -> None:
    calls = Calls()
    a = candidate(client, name, "a", calls)
    b = candidate(client, name, "b")
    one, two = face.actor(), face.actor()
    assert await face.call(a.leader) is None
    assert (a.term, a.is_leader()) == (None, False)
    assert await one(a.campaign)
    assert a.is_leader() and calls.elected == [a.term]
    leader = await face.call(b.leader)
    assert isinstance(leader, Leader)
    assert (leader.value, leader.term) == ("a", a.term)
    assert abs(leader.since.timestamp() - time.time()) < 60
    assert a.term is not None and a.term > 1_700_000_000 * 10**6  # from the server's clock
    assert not await two(b.campaign, 0)  # one attempt
    assert not await two(b.campaign, 0.2)
    assert await one(a.campaign)  # leading already: at once, same term
    assert await one(a.resign)
    assert calls.revoked == [None] and not a.is_leader()
    assert not await one(a.resign)  # nothing to give up
    assert await face.call(b.leader) is None
    first = a.term
    assert await two(b.campaign, 5)
    assert b.term is not None and b.term > first
    assert a.term == first  # kept after the leadership ended
    await two(b.resign)


async def test_candidates_lead_in_arrival_order(
    face: Face, client: Any, raw: Any, name: str
) -> None:
    first = candidate(client, name, "first")
    assert await face.actor()(first.campaign)
    order: list[str] = []
    actors, elections, runs = [], [], []
    for i in range(3):
        election = candidate(client, name, f"c{i}")
        actor = face.actor()

        async def run(e: Any = election, actor: Any = actor) -> None:
            assert await actor(e.campaign, 20)
            order.append(e.value)
            await asyncio.sleep(0.05)
            await actor(e.resign)

        runs.append(asyncio.ensure_future(run()))
        await queued(raw, first, i + 1)
        actors.append(actor)
        elections.append(election)
    await face.actor()(first.resign)
    await within(20, asyncio.gather(*runs))
    assert order == ["c0", "c1", "c2"]


async def test_a_resign_hands_over_at_once(face: Face, client: Any, raw: Any, name: str) -> None:
    # the default lease (30 s): a hand-over that waited for it would show
    a, b = candidate(client, name, "a"), candidate(client, name, "b")
    one, two = face.actor(), face.actor()
    assert await one(a.campaign)
    waiting = asyncio.ensure_future(two(b.campaign))
    await queued(raw, a, 1)
    started = time.monotonic()
    await one(a.resign)
    assert await within(10, waiting)
    assert time.monotonic() - started < 2
    assert b.is_leader()
    await two(b.resign)


async def test_a_deleted_leadership_is_revoked_once(
    face: Face, client: Any, raw: Any, name: str
) -> None:
    calls = Calls()
    a = candidate(client, name, "a", calls, lease_time=LEASE)
    b = candidate(client, name, "b", lease_time=LEASE)
    one, two = face.actor(), face.actor()
    assert await one(a.campaign)
    old = a.term
    assert old is not None
    writer = uuid.uuid4().hex
    assert fencing.fenced_set(raw, f"{name}:data", "a1", old, writer=writer)
    raw.delete(a._core.lock.name)  # an operator's forced delete
    assert await two(b.campaign, 5)  # b leads at once: a is not told yet
    assert b.term is not None and b.term > old
    assert fencing.fenced_set(raw, f"{name}:data", "b1", b.term, writer="b")
    await calls.wait_revoked(1, LEASE)  # the next renewal finds it gone
    assert calls.revoked == [LossReason.NOT_HELD]
    assert not a.is_leader()
    # the old leader's late write is refused by the term
    assert not fencing.fenced_set(raw, f"{name}:data", "a2", old, writer=writer)
    assert raw.get(f"{name}:data") == b"b1"
    with pytest.raises(syncprims.LockNotHeldError):
        await one(a.proclaim, "late")
    assert not await one(a.resign)  # gives the lost hold back quietly
    await asyncio.sleep(0.1)
    assert calls.revoked == [LossReason.NOT_HELD]  # once
    await two(b.resign)


async def test_on_elected_raising_resigns_and_revokes(face: Face, client: Any, name: str) -> None:
    revoked: list[LossReason | None] = []

    def fail(term: int) -> None:
        raise KeyError(term)

    a = client.get_leader_election(name, on_elected=fail, on_revoked=revoked.append)
    with pytest.raises(KeyError):
        await face.actor()(a.campaign)
    assert revoked == [None]
    assert not a.is_leader()
    assert await face.call(a.leader) is None
    b = candidate(client, name, "b")
    assert await face.actor()(b.campaign, 1)


async def test_proclaim_and_the_context_manager(face: Face, client: Any, name: str) -> None:
    a, b = candidate(client, name, "a"), candidate(client, name, "b")
    actor = face.actor()
    with pytest.raises(syncprims.LockNotHeldError):
        await actor(a.proclaim, "x")
    with pytest.raises(TypeError):
        await actor(a.proclaim, 3)
    entered = a.__aenter__ if face.is_async else a.__enter__
    left = a.__aexit__ if face.is_async else a.__exit__
    assert await actor(entered) is a
    term = a.term
    await actor(a.proclaim, "a2")
    leader = await face.call(b.leader)
    assert leader is not None and leader == Leader("a2", term or 0, leader.since)
    assert a.value == "a2"
    await actor(left, None, None, None)
    assert not a.is_leader() and await face.call(b.leader) is None


async def test_a_lease_read_at_its_last_millisecond_is_re_read_soon(
    face: Face, client: Any, name: str
) -> None:
    """Redis answers PTTL 0 (not -2) for a key at its expiry's millisecond; the observer's
    re-read lands there by design (it parks for the lease's PTTL), and must then re-read
    after a back-off, not after the re-check interval (5 s: longer than this timeout)."""
    a = candidate(client, name, "a")
    dead = Leader("dead", 7, datetime.fromtimestamp(1, UTC))
    reads: list[float] = []

    async def read() -> tuple[Leader | None, int]:
        reads.append(time.monotonic())
        return (dead, 0) if len(reads) < 3 else (None, -2)

    a._core._read = read
    started = time.monotonic()
    if face.is_async:
        changed, leader = await within(10, a._core.next_change(dead, 3))
    else:
        changed, leader = await within(10, face.call(lambda: drive(a._core.next_change(dead, 3))))
    assert (changed, leader) == (True, None), (changed, leader)
    assert time.monotonic() - started < 1.5, [round(t - started, 3) for t in reads]


async def test_an_expired_leadership_is_observed_as_a_vacancy(
    face: Face, client: Any, raw: Any, name: str
) -> None:
    a = candidate(client, name, "a")
    lock = a._core.lock.name
    # a leader that dies: its record, then no renewal (an expiry publishes nothing)
    raw.hset(lock, mapping={"someone:1": 1, "term": 7, "value": "dead", "since": 10**15})
    raw.pexpire(lock, 600)
    seen: list[Any] = []
    started = time.monotonic()

    def observe() -> None:
        for leader in a.observe(timeout=3):
            seen.append((leader, time.monotonic() - started))
            if leader is None:
                return

    async def observe_async() -> None:
        async for leader in a.observe(timeout=3):
            seen.append((leader, time.monotonic() - started))
            if leader is None:
                return

    if face.is_async:
        await within(10, observe_async())
    else:
        await within(10, asyncio.get_running_loop().run_in_executor(None, observe))
    assert seen[0][0] == Leader("dead", 7, seen[0][0].since)
    assert seen[-1][0] is None and 0.5 < seen[-1][1] < 2.5
    # and a new leader, then its resign, are seen too
    changes: list[Any] = []
    done = threading.Event()

    def watch() -> None:
        for leader in a.observe(timeout=5):
            changes.append(leader)
            if len(changes) == 3:
                break
        done.set()

    watcher = threading.Thread(target=watch) if not face.is_async else None
    if watcher is not None:
        watcher.start()
        task = None
    else:

        async def watch_async() -> None:
            async for leader in a.observe(timeout=5):
                changes.append(leader)
                if len(changes) == 3:
                    break
            done.set()

        task = asyncio.ensure_future(watch_async())
    deadline = time.monotonic() + 5
    while not changes and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    actor = face.actor()
    await asyncio.sleep(0.1)
    assert await actor(a.campaign, 2)
    await asyncio.sleep(0.2)
    await actor(a.resign)
    deadline = time.monotonic() + 5
    while not done.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    if task is not None:
        await within(5, task)
    if watcher is not None:
        watcher.join(5)
    assert changes[0] is None and changes[2] is None
    assert changes[1] is not None and changes[1].term == a.term


async def test_observe_times_out_without_a_change(face: Face, client: Any, name: str) -> None:
    a = candidate(client, name, "a")
    started = time.monotonic()
    if face.is_async:
        seen = [leader async for leader in a.observe(timeout=0.3)]
    else:
        seen = await face.call(lambda: list(a.observe(timeout=0.3)))
    assert seen == [None]
    assert 0.25 < time.monotonic() - started < 3


async def test_bad_settings_are_value_errors(face: Face, client: Any, name: str) -> None:
    for lease in (0.5, 0, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="lease_time"):
            client.get_leader_election(name, lease_time=lease)
    with pytest.raises(TypeError, match="value"):
        client.get_leader_election(name, value=3)
    with pytest.raises(TypeError, match="on_elected"):
        client.get_leader_election(name, on_elected=3)
    with pytest.raises(ValueError, match="empty"):
        client.get_leader_election("")
    a = client.get_leader_election(name)
    actor = face.actor()
    for wait in (-1, math.nan):
        with pytest.raises(ValueError, match="wait_time"):
            await actor(a.campaign, wait)
    observer = a.observe(timeout=-1)
    with pytest.raises(ValueError, match="timeout"):
        await (anext(observer) if face.is_async else face.call(next, observer))
    assert await face.call(a.leader) is None  # nothing was sent or taken


async def test_shutdown_resigns_and_the_next_leads_at_once(
    face: Face, url: str, raw: Any, name: str
) -> None:
    first = await face.connect(url)
    second = await face.connect(url)
    calls = Calls()
    a = candidate(first, name, "a", calls)  # the default 30 s lease
    b = candidate(second, name, "b")
    assert await face.actor()(a.campaign)
    waiting = asyncio.ensure_future(face.actor()(b.campaign))
    await queued(raw, a, 1)
    started = time.monotonic()
    await face.call(first.shutdown)
    assert calls.revoked == [None]
    assert await within(10, waiting)
    assert time.monotonic() - started < 3
    await face.actor()(b.resign)


async def test_lead_or_cancel(real_url: str, name: str) -> None:
    """The asyncio face's helper (a thread cannot be cancelled from outside)."""
    raw = raw_redis(real_url)
    client = await syncprims.asyncio.connect(real_url)
    try:
        a = client.get_leader_election(name, value="a", lease_time=LEASE)
        # lost: the block is cancelled and ends with LockLostError
        reached = asyncio.Event()
        with pytest.raises(syncprims.LockLostError, match="ended while leading"):  # noqa: PT012
            async with a.lead_or_cancel(wait_time=1) as term:
                assert term == a.term and a.is_leader()
                raw.delete(a._core.lock.name)
                reached.set()
                await asyncio.sleep(10)
        assert reached.is_set() and not a.is_leader()
        # resigned from another task: the work stops first, then the leadership goes
        order: list[str] = []
        started = asyncio.Event()

        async def work() -> None:
            with pytest.raises(syncprims.LockLostError):  # noqa: PT012
                async with a.lead_or_cancel():
                    started.set()
                    try:
                        await asyncio.sleep(10)
                    finally:
                        leader = await a.leader()  # still ours while the work drains
                        order.append("work stopped" if leader is not None else "too late")

        task = asyncio.ensure_future(work())
        await within(5, started.wait())
        assert await a.resign()
        order.append("resigned")
        await within(5, task)
        assert order == ["work stopped", "resigned"]
        assert await a.leader() is None
        # a normal end resigns; a timed-out campaign raises
        async with a.lead_or_cancel():
            b = client.get_leader_election(name, value="b")
            with pytest.raises(syncprims.LockTimeoutError):
                async with b.lead_or_cancel(wait_time=0.1):
                    pass
        assert await a.leader() is None
        # shutdown: the work is cancelled and drained before the leadership is released
        started.clear()
        order.clear()
        task = asyncio.ensure_future(work())
        await within(5, started.wait())
        await client.shutdown()
        await within(5, task)
        assert order == ["work stopped"]
        assert raw.exists(a._core.lock.name) == 0
    finally:
        await client.shutdown()
        raw.close()


def test_an_empty_restart_revokes_and_terms_still_increase() -> None:
    with RedisServer() as server, syncprims.connect(server.url) as client:
        calls = Calls()
        a = candidate(client, "restart", "a", calls, lease_time=10)
        assert a.campaign()
        old = a.term
        assert old is not None
        time.sleep(0.3)  # the watchdog has read the server once
        server.restart()  # empty: no persistence, the term counter is gone
        deadline = time.monotonic() + 5
        while not calls.revoked and time.monotonic() < deadline:
            time.sleep(0.02)
        assert calls.revoked == [LossReason.DATA_LOST]
        assert not a.is_leader()
        b = candidate(client, "restart", "b")
        assert b.campaign(wait_time=5)
        assert b.term is not None and b.term > old
        b.resign()
        a.resign()


def test_a_leader_cut_off_from_redis_is_revoked_by_its_lease_and_stays_revoked() -> None:
    with RedisServer() as server, syncprims.connect(server.url, timeout=0.3) as client:
        calls = Calls()
        a = candidate(client, "cut", "a", calls, lease_time=LEASE)
        assert a.campaign()
        old = a.term
        assert old is not None
        elected = time.monotonic()
        server.pause()  # it keeps the connections, answers nothing: renewals time out
        try:
            while a.is_leader():
                time.sleep(0.005)
            gone = time.monotonic() - elected
            deadline = time.monotonic() + 2
            while not calls.revoked and time.monotonic() < deadline:
                time.sleep(0.01)
            told = time.monotonic() - elected
        finally:
            server.resume()
        assert gone <= LEASE  # by its lease, counted from the last renewal sent
        assert calls.revoked == [LossReason.RENEWAL_FAILED] and told < LEASE + 0.5
        time.sleep(LEASE)  # the key has expired in Redis meanwhile; reconnected now
        with syncprims.connect(server.url) as other:
            b = candidate(other, "cut", "b")
            assert b.campaign(wait_time=5) and b.term is not None and b.term > old
            assert not a.is_leader()  # a reconnect never gives the leadership back
            leader = b.leader()
            assert leader is not None and leader.value == "b"
            b.resign()
        assert not a.resign()  # gives the lost hold back quietly


@pytest.mark.sentinel
def test_an_election_through_sentinel(sentinels: SentinelSet, name: str) -> None:
    with syncprims.connect(sentinels.url) as first, syncprims.connect(sentinels.url) as second:
        a, b = candidate(first, name, "a"), candidate(second, name, "b")
        assert a.campaign()
        got: list[bool] = []
        thread = threading.Thread(target=lambda: got.append(b.campaign(wait_time=10)))
        thread.start()
        time.sleep(0.2)
        a.resign()
        thread.join(10)
        assert got == [True] and b.is_leader() and b.term is not None and a.term is not None
        assert b.term > a.term
        leader = a.leader()
        assert leader is not None and leader.value == "b"
        b.resign()


def test_the_demo_runs_an_election(redis_server: RedisServer) -> None:
    from syncprims.cli.demo import run_demo

    result = run_demo(redis_server.url, primitive="election", processes=1, threads=2, seconds=1)
    assert result.ok and result.acquisitions > 0 and result.overlaps == 0
    assert result.handoffs > 0
