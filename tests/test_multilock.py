"""MultiLock and RedLock on five real masters: quorum, failures, validity, cleanup."""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import time
import uuid
from typing import Any

import pytest
import redis

import syncprims
import syncprims.asyncio
from syncprims import LockNotHeldError
from syncprims._core.lock import grant as grant_module
from syncprims._core.lock import wakeup as wakeup_module
from syncprims._embedded import RedisServer
from syncprims._protocol import scripts
from syncprims._protocol.contracts import PENDING
from tests import processes
from tests.harness import Face, lock_fields, lock_owners, released_everywhere, within

pytestmark = pytest.mark.real


def _urls(servers: list[RedisServer]) -> list[str]:
    return [s.url for s in servers]


async def test_red_lock_on_five_masters(face: Face, five: list[RedisServer], name: str) -> None:
    masters = await face.connect_many(_urls(five))
    red = masters.get_red_lock(name)
    a, b = face.actor(), face.actor()
    assert await a(red.try_lock, lease_time=10)
    held = lock_owners(five, name)
    # Every master, unless one answered after the fan-out's grace (a starved machine): that
    # late grant is taken and released in the background (it may show in one read and not
    # in the next), and the lock is held by the quorum that answered in time. So what may
    # show is a's field on each master (its client's id, a's owner id), nothing else.
    owners = {field.rsplit(":", 1)[1] for fields in held for field in fields}
    assert len(owners) == 1 and sum(map(len, held)) >= 3, held
    a_fields = [{f"{client.id}:{next(iter(owners))}"} for client in masters.clients]
    assert all(fields <= mine for fields, mine in zip(held, a_fields, strict=True)), held
    assert await a(red.is_held_by_current_thread)
    validity = await a(red.validity_time)
    assert validity is not None and 9.5 < validity <= 10
    assert not await b(red.try_lock)
    assert not await b(red.try_lock, wait_time=0.3)
    after = lock_owners(five, name)  # b's attempts left nothing behind; a still holds
    assert all(fields <= mine for fields, mine in zip(after, a_fields, strict=True)), after
    assert sum(map(len, after)) >= 3, after
    await a(red.unlock)
    assert await released_everywhere(five, name) == [0, 0, 0, 0, 0]
    assert await b(red.try_lock, wait_time=1)
    await b(red.unlock)


async def test_waiter_gets_the_red_lock_when_released(
    face: Face, five: list[RedisServer], name: str
) -> None:
    masters = await face.connect_many(_urls(five))
    red = masters.get_red_lock(name)
    a, b = face.actor(), face.actor()
    await a(red.lock)  # watchdog leases
    waiter = asyncio.ensure_future(b(red.try_lock, wait_time=20))
    await asyncio.sleep(0.3)
    released = time.monotonic()
    await a(red.unlock)
    assert await within(10, waiter)
    assert time.monotonic() - released < 2  # a release wakes it (or its back-off does)
    await b(red.unlock)


async def test_a_red_lock_runs_redissons_plain_scripts_and_wakes_rlock_waiters(
    face: Face, five: list[RedisServer], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RedLock never registers its waits, so its sub-locks run Redisson's plain scripts
    (as the raw fan-out it is measured against), not the one wake-up's. An RLock waiter of
    the same name on one master, which did register, is still woken by the RedLock
    release's ``0`` (re-checks a minute apart here: only the wake-up can end the wait)."""
    monkeypatch.setattr(wakeup_module, "ONE_WAKE_SLICE_MS", 60_000)  # the scripts' slice
    monkeypatch.setattr(grant_module, "ONE_WAKE_SLICE_MS", 60_000)  # a grant wait's
    raws: list[Any] = [redis.Redis.from_url(server.url) for server in five]
    try:
        for raw in raws:
            raw.script_flush()
        masters = await face.connect_many(_urls(five))
        single = await face.connect(five[0].url, wait_recheck_interval=60)
        red = masters.get_red_lock(name)
        a, b = face.actor(), face.actor()
        for _ in range(5):  # held on master 0 too (a grant there may miss the grace, loaded)
            assert await a(red.try_lock, lease_time=30)
            if raws[0].hlen(name):
                break
            await a(red.unlock)
        assert raws[0].hlen(name) == 1
        waiter = asyncio.ensure_future(b(single.get_lock(name).try_lock, wait_time=20))
        deadline = time.monotonic() + 10
        while not raws[0].zcard(f"syncprims_lock_waiters:{{{name}}}"):
            if waiter.done():  # it ended instead of waiting: its error says why
                pytest.fail(f"the RLock waiter ended before it waited: {waiter.result()!r}")
            assert time.monotonic() < deadline, (
                f"no waiter registered; {name}: {raws[0].hgetall(name)}"
            )
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # blocked in its wait by now
        await a(red.unlock)
        assert await within(10, waiter)
        await b(single.get_lock(name).unlock)
        assert await released_everywhere(five, name) == [0, 0, 0, 0, 0]
        plain = [scripts.LOCK_ACQUIRE.sha, scripts.LOCK_UNLOCK.sha]
        for raw in raws[1:]:  # only the RedLock ran scripts there
            assert raw.script_exists(*plain) == [True, True]
            # Never the one wake-up's acquire. (A grant that came after the fan-out had its
            # quorum is undone in the background by the lock's own unlock, which may be the
            # one wake-up's: seen on a loaded machine, and harmless.)
            assert raw.script_exists(scripts.LOCK_ACQUIRE_ONE.sha) == [False]
    finally:
        for raw in raws:
            raw.close()


async def test_two_dead_masters_tolerated_three_not(
    face: Face, doomed: list[RedisServer], name: str
) -> None:
    first = await face.connect_many(_urls(doomed))
    second = await face.connect_many(_urls(doomed))  # another client (process)
    a, b = face.actor(), face.actor()
    mine, theirs = first.get_red_lock(name), second.get_red_lock(name)
    doomed[0].kill()
    doomed[1].kill()
    start = time.monotonic()
    assert await a(mine.try_lock, lease_time=10)
    assert time.monotonic() - start < 1  # dead masters cost (almost) nothing
    assert not await b(theirs.try_lock, wait_time=0.5)  # no double grant
    await a(mine.unlock)
    assert await b(theirs.try_lock, lease_time=10)
    await b(theirs.unlock)
    doomed[2].kill()
    start = time.monotonic()
    assert not await a(mine.try_lock, wait_time=1, lease_time=10)
    assert time.monotonic() - start < 1 + 0.5 + 0.5  # wait + per-node timeout + slack
    assert not await b(theirs.try_lock)


async def test_a_paused_master_costs_its_per_node_timeout(
    face: Face, doomed: list[RedisServer], name: str
) -> None:
    masters = await face.connect_many(_urls(doomed), timeout=0.3)
    red = masters.get_red_lock(name)
    a = face.actor()
    assert await a(red.try_lock, lease_time=10)  # connections are open now
    await a(red.unlock)
    doomed[4].pause()
    try:
        start = time.monotonic()
        assert await a(red.try_lock, lease_time=10)
        assert time.monotonic() - start < 0.3 + 0.4
        start = time.monotonic()
        await a(red.unlock)
        assert time.monotonic() - start < 0.3 + 0.4
    finally:
        doomed[4].resume()


async def test_masters_restarted_empty_do_not_break_exclusion(
    face: Face, doomed: list[RedisServer], name: str
) -> None:
    # A lease-bound RedLock survives a minority of masters losing their data.
    first = await face.connect_many(_urls(doomed))
    second = await face.connect_many(_urls(doomed))
    a, b = face.actor(), face.actor()
    assert await a(first.get_red_lock(name).try_lock, lease_time=30)
    doomed[0].restart()
    doomed[1].restart()
    await asyncio.sleep(0.2)
    assert not await b(second.get_red_lock(name).try_lock, wait_time=0.5, lease_time=30)
    assert lock_fields(doomed, name)[2:] == [1, 1, 1]


async def test_kept_connections_closed_by_restarts_are_not_written_to(
    face: Face, doomed: list[RedisServer], name: str
) -> None:
    # The fan-out keeps a connection per master between calls and checks them for a
    # server-side close together (one select). After two masters restarted, the next
    # attempt is granted on all five. (It passed with that check disabled too, on this
    # machine: it pins the behaviour, not the mechanism.)
    masters = await face.connect_many(_urls(doomed))
    red = masters.get_red_lock(name)
    a = face.actor()
    for _ in range(3):  # connections kept on every master
        assert await a(red.try_lock, lease_time=10)
        await a(red.unlock)
    doomed[0].restart()
    doomed[3].restart()
    await asyncio.sleep(0.2)  # the close reached the client's sockets
    for _ in range(5):
        # A restarted master costs NOSCRIPT + SCRIPT LOAD + EVALSHA where the others cost one
        # call: on a loaded host its grant can miss the grace and be given back (CI saw it),
        # so the next attempts may be needed; each one is granted.
        assert await a(red.try_lock, lease_time=10)
        fields = lock_fields(doomed, name)
        await a(red.unlock)
        if fields == [1, 1, 1, 1, 1]:
            break
    assert fields == [1, 1, 1, 1, 1]
    assert await released_everywhere(doomed, name) == [0, 0, 0, 0, 0]


async def test_validity_time_and_expiry(face: Face, five: list[RedisServer], name: str) -> None:
    masters = await face.connect_many(_urls(five))
    red = masters.get_red_lock(name)
    a = face.actor()
    assert await a(red.validity_time) is None
    assert await a(red.try_lock, lease_time=0.5)
    first = await a(red.validity_time)
    assert first is not None and 0.4 < first <= 0.5
    await asyncio.sleep(0.2)
    later = await a(red.validity_time)
    assert later is not None and later < first - 0.15
    await asyncio.sleep(0.5)
    assert await a(red.validity_time) == 0
    assert lock_fields(five, name) == [0, 0, 0, 0, 0]  # the leases ran out everywhere
    with pytest.raises(LockNotHeldError) as raised:
        await a(red.unlock)
    # One name on five masters: the message names it once, the error carries it bare.
    assert str(raised.value).count(name) == 1, str(raised.value)
    assert f"RedLock of {name!r} is not held" in str(raised.value)
    assert raised.value.name == name


async def test_watchdog_keeps_a_red_lock(face: Face, five: list[RedisServer], name: str) -> None:
    masters = await face.connect_many(_urls(five), lock_watchdog_timeout=0.6)
    red = masters.get_red_lock(name)
    a = face.actor()
    await a(red.lock)
    await asyncio.sleep(1.5)
    assert await a(red.is_held_by_current_thread)
    assert await a(red.validity_time) is None
    await a(red.unlock)


async def test_multi_lock_on_one_server_and_across_servers(
    face: Face, five: list[RedisServer], name: str
) -> None:
    client = await face.connect(five[0].url)
    masters = await face.connect_many(_urls(five))
    a, b = face.actor(), face.actor()
    local = face.module.MultiLock(*(client.get_lock(f"{name}:{i}") for i in range(3)))
    spread = masters.get_multi_lock(name)
    for multi in (local, spread):
        assert await a(multi.try_lock)
        assert not await b(multi.try_lock)
        await a(multi.unlock)
        assert await b(multi.try_lock)
        await b(multi.unlock)
    same = client.get_multi_lock(client.get_lock(f"{name}:x"), client.get_lock(f"{name}:y"))
    assert isinstance(same, face.module.MultiLock)


async def test_a_partial_acquisition_is_released(
    face: Face, five: list[RedisServer], name: str
) -> None:
    client = await face.connect(five[0].url)
    a, b = face.actor(), face.actor()
    parts = [client.get_lock(f"{name}:{i}") for i in range(3)]
    await b(parts[2].lock)  # someone holds one part
    multi = face.module.MultiLock(*parts)
    assert not await a(multi.try_lock, wait_time=0.3)
    for part in parts[:2]:
        assert not await a(part.is_locked)  # what a's attempts took was given back
    await b(parts[2].unlock)
    assert await a(multi.try_lock)
    await a(multi.unlock)


async def test_multi_lock_unlock_raises_when_a_part_is_not_held(
    face: Face, five: list[RedisServer], name: str
) -> None:
    client = await face.connect(five[0].url)
    a = face.actor()
    parts = [client.get_lock(f"{name}:{i}") for i in range(3)]
    multi = face.module.MultiLock(*parts)
    await a(multi.lock)
    await a(parts[1].force_unlock)
    with pytest.raises(LockNotHeldError):
        await a(multi.unlock)
    for part in parts:
        assert not await a(part.is_locked)  # the others were released anyway


async def test_sub_locks_of_every_kind(face: Face, five: list[RedisServer], name: str) -> None:
    client = await face.connect(five[0].url)
    a, b = face.actor(), face.actor()
    rw = client.get_read_write_lock(f"{name}:rw")
    multi = face.module.MultiLock(
        client.get_lock(f"{name}:plain"),
        client.get_fair_lock(f"{name}:fair"),
        rw.write_lock(),
    )
    assert await a(multi.try_lock)
    assert not await b(rw.read_lock().try_lock)
    await a(multi.unlock)
    assert await b(rw.read_lock().try_lock)
    await b(rw.read_lock().unlock)


def test_cancelled_async_acquire_leaves_nothing_held(five: list[RedisServer], name: str) -> None:
    import syncprims.asyncio

    async def main() -> None:
        masters = await syncprims.asyncio.connect_many(_urls(five))
        red = masters.get_red_lock(name)
        blockers = [client.get_lock(name) for client in masters.clients[:3]]

        async def hold() -> None:  # another owner (task) holds a majority: red must wait
            for blocker in blockers:
                await blocker.lock()

        await asyncio.ensure_future(hold())
        for delay in (0, 0.0002, 0.0005, 0.001, 0.003, 0.05):
            task = asyncio.ensure_future(red.try_lock(wait_time=5))
            await asyncio.sleep(delay)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.3)  # undoing abandoned calls runs in the background
        held = lock_fields(five, name)
        assert held == [1, 1, 1, 0, 0]  # only the blockers' own holds
        await masters.shutdown()

    asyncio.run(main())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one"):
        syncprims.MultiLock()
    with pytest.raises(TypeError, match="lock objects"):
        syncprims.RedLock("not a lock")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty list"):
        syncprims.connect_many("redis://127.0.0.1:1")


def test_connect_many_needs_a_majority(doomed: list[RedisServer]) -> None:
    for server in doomed[:3]:
        server.kill()
    with pytest.raises(syncprims.RedisConnectionError):
        syncprims.connect_many(_urls(doomed))
    doomed[0].start()
    with syncprims.connect_many(_urls(doomed)) as masters:  # 3 of 5 answer: enough
        assert len(masters.clients) == 5


def test_redlock_demo_survives_killed_masters(tmp_path: Any) -> None:
    import sys

    result = processes.run(
        [sys.executable, "-m", "syncprims", "demo", "--primitive", "redlock", "--masters", "5",
         "--processes", "2", "--threads", "2", "--seconds", "4"],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "killed 2 of 5 masters" in result.stdout
    assert "mutual exclusion: OK" in result.stdout


async def test_the_fast_fan_out_loads_a_flushed_script(five: list[RedisServer], name: str) -> None:
    """The asyncio fan-out queues each master's call on its shared connection without a
    task; a NOSCRIPT reply (the script cache flushed) takes the per-call path, which loads
    the script: the lock is taken and released on every master."""
    from syncprims._transport.aio.server import AsyncServer

    raws: list[Any] = [redis.Redis.from_url(server.url) for server in five]
    masters = await syncprims.asyncio.connect_many(_urls(five))
    try:
        red = masters.get_red_lock(name)
        await red.lock(lease_time=30)
        await red.unlock()
        executors = [client._ex for client in masters.clients]
        servers = [ex.transport for ex in executors]
        assert all(isinstance(s, AsyncServer) and s.shares_open() for s in servers)  # fast path
        for raw in raws:
            raw.script_flush()
        await red.lock(lease_time=30)
        # Every master, unless one answered after the fan-out's grace (a starved machine):
        # the lock returns with a quorum, and a late grant is released.
        held = lock_fields(five, name)
        assert set(held) <= {0, 1} and sum(held) >= 3, held
        await red.unlock()
        assert await released_everywhere(five, name) == [0, 0, 0, 0, 0]
    finally:
        await masters.shutdown()
        for raw in raws:
            raw.close()


async def test_red_lock_callers_cancelled_at_any_point_leave_nothing_held(
    five: list[RedisServer],
) -> None:
    """A RedLock acquire cancelled before its writes, in flight or as the replies come
    gives back what its masters granted (each call's on_orphan), on the fast fan-out."""
    rng = random.Random(11)
    raws: list[Any] = [redis.Redis.from_url(server.url) for server in five]
    masters = await syncprims.asyncio.connect_many(_urls(five))
    prefix = f"fanout:{uuid.uuid4().hex[:8]}"
    try:
        warm = masters.get_red_lock(f"{prefix}:warm")
        await warm.lock(lease_time=30)
        await warm.unlock()
        names = [f"{prefix}:{i}" for i in range(60)]
        for i, lock_name in enumerate(names):
            red = masters.get_red_lock(lock_name)
            call = asyncio.create_task(red.try_lock(lease_time=30))
            if i % 2:
                for _ in range(rng.randint(0, 4)):
                    await asyncio.sleep(0)
            else:
                await asyncio.sleep(rng.uniform(0, 0.001))
            call.cancel()
            try:
                taken = await call
            except asyncio.CancelledError:
                taken = False
            if taken:  # done before the cancel came: held by the task's owner, not ours
                for raw in raws:
                    raw.delete(lock_name)
        deadline = time.monotonic() + 10
        while any(lock_fields(five, n) != [0] * 5 for n in names):
            assert time.monotonic() < deadline, "an abandoned sub-lock was not given back"
            await asyncio.sleep(0.05)
    finally:
        await masters.shutdown()
        for raw in raws:
            raw.close()


def test_a_one_lock_multi_lock_takes_the_single_call_path(
    redis_server: RedisServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fan-out of one call (a MultiLock of one lock, a RedLock on one master) runs as a
    single call, with the same outcomes: held, refused to another client, its script loaded
    again after SCRIPT FLUSH, released."""
    import syncprims._runtime.sync as sync_runtime
    from syncprims._transport.blocking.fanout import fan_out as real_fan_out

    fanned: list[int] = []

    def counting(calls: Any, enough: Any = None) -> list[Any]:
        fanned.append(len(calls))
        return real_fan_out(calls, enough)

    monkeypatch.setattr(sync_runtime, "fan_out", counting)
    admin = redis.Redis(port=redis_server.port)
    with (
        syncprims.connect(redis_server.url) as client,
        syncprims.connect(redis_server.url) as other,
    ):
        multi = client.get_multi_lock(client.get_lock(name))
        rival = other.get_multi_lock(other.get_lock(name))
        assert multi.try_lock()
        assert multi.is_locked()
        assert not rival.try_lock(wait_time=0.2)
        admin.script_flush()  # the unlock meets NOSCRIPT: loaded again, run once
        multi.unlock()
        assert admin.exists(name) == 0
        assert rival.try_lock()
        rival.unlock()
    admin.close()
    assert fanned == []


def test_a_red_lock_attempt_is_routed_once_and_remade_for_a_new_field(
    five: list[RedisServer], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An owner's attempt (its calls, routed once by the blocking executor) is kept between
    acquires; a new field (an earlier release's outcome unknown) or a new lease makes new
    calls, so every attempt names the field and lease it should. A list of calls (a
    release's) is routed afresh every time."""
    import syncprims._runtime.sync as sync_runtime
    from syncprims._transport.blocking.fanout import fan_out as real_fan_out

    routed: list[Any] = []

    def recording(calls: Any, enough: Any = None) -> list[Any]:
        routed.append(calls)
        return real_fan_out(calls, enough)

    monkeypatch.setattr(sync_runtime, "fan_out", recording)
    masters = syncprims.connect_many(_urls(five))
    admins = [redis.Redis(port=server.port) for server in five]
    try:
        red = masters.get_red_lock(name)
        owner = threading.get_ident()
        for _ in range(5):
            # Two pairs with the same fields. On a loaded host a sub-lock's release can be
            # left to the late lane past the quorum's grace: its outcome unknown, the next
            # acquire takes a new field, and new calls (as below): then try again.
            routed.clear()
            fields = [sub.field(owner) for sub in red._core.locks]
            for _ in range(2):
                red.lock()
                red.unlock()
            if len(routed) == 4 and fields == [sub.field(owner) for sub in red._core.locks]:
                break
        first_acquire, first_release, second_acquire, second_release = routed
        assert second_acquire is first_acquire  # kept: routed once
        assert second_release is not first_release  # a release's latch keys are new
        sub = red._core.locks[0]
        old_field = sub.field(owner)
        sub.releases.taint(old_field)  # as after a release whose outcome was unknown
        red.lock(lease_time=20)
        new_field = sub.field(owner)
        assert new_field != old_field
        assert admins[0].hkeys(name) == [new_field.encode()]
        assert 19_000 < admins[0].pttl(name) <= 20_000  # the new lease, not the kept one
        assert routed[-1] is not first_acquire
        red.unlock()
        assert all(admin.exists(name) == 0 for admin in admins)
    finally:
        masters.shutdown()
        for admin in admins:
            admin.close()


def test_a_fair_sub_locks_attempts_each_carry_the_time(
    redis_server: RedisServer, name: str
) -> None:
    """A FairLock's attempt carries the time its queue is purged by, so a MultiLock does
    not keep it between attempts: a dead waiter at the head of the queue, whose deadline
    passes while the MultiLock retries, is dropped by a later attempt, which then takes
    the lock (with the first attempt's time kept, no attempt would ever drop it)."""
    admin = redis.Redis(port=redis_server.port)
    queue, timeouts = f"redisson_lock_queue:{{{name}}}", f"redisson_lock_timeout:{{{name}}}"
    with syncprims.connect(redis_server.url) as client:
        multi = client.get_multi_lock(client.get_fair_lock(name), client.get_lock(f"{name}:b"))
        seconds, micros = admin.time()
        deadline_ms = int(seconds) * 1000 + int(micros) // 1000 + 400  # past mid-wait
        admin.rpush(queue, "dead-client:1")
        admin.zadd(timeouts, {"dead-client:1": deadline_ms})
        began = time.monotonic()
        assert multi.try_lock(wait_time=5, lease_time=10)
        assert time.monotonic() - began < 4
        assert admin.hkeys(name) != [b"dead-client:1"]
        multi.unlock()
    admin.close()


@pytest.mark.parametrize("holds", [1, 3])
async def test_a_red_lock_is_lost_with_its_quorum_and_told_once(
    face: Face, five: list[RedisServer], name: str, holds: int
) -> None:
    """Losing a minority of the masters' holds is not losing a RedLock; losing the quorum is,
    told once (``on_lost``, ``is_lost``, ``ensure_held``) whatever the hold count."""
    told: list[tuple[str, str]] = []
    masters = await face.connect_many(_urls(five), lock_watchdog_timeout=0.6)
    red = masters.get_red_lock(name, on_lost=lambda n, reason: told.append((n, reason)))
    a = face.actor()
    for _ in range(holds):
        await a(red.lock)
    raws = [redis.Redis.from_url(server.url) for server in five]
    try:
        # The masters that granted it: all five, or (a loaded machine) a quorum whose
        # fan-out stopped before a late one answered, whose grant was then given back.
        # (read until it stays the same for 0.3 s: a late grant is given back in the
        # background, moments after the acquire returned)
        holders: list[redis.Redis] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            now = [raw for raw in raws if raw.exists(name)]
            if now == holders:
                break
            holders = now
            await asyncio.sleep(0.3)
        assert len(holders) >= 3
        for raw in holders[: len(holders) - 3]:  # a minority: still held
            raw.delete(name)
        await asyncio.sleep(0.8)  # every hold renewed at least once since
        assert told == [] and not await a(lambda: red.is_lost)
        await a(red.ensure_held)
        holders[-1].delete(name)  # the quorum is gone
        deadline = time.monotonic() + 5
        while not told and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.6)  # more renewal periods: nothing is told again
        assert [n for n, _ in told] == [name]
        assert await a(lambda: red.is_lost)
        with pytest.raises(syncprims.LockLostError, match="was lost"):
            await a(red.ensure_held)
    finally:
        for raw in raws:
            raw.close()
    for _ in range(holds):
        with pytest.raises(LockNotHeldError):
            await a(red.unlock)
    assert not await a(lambda: red.is_lost)  # forgotten with the hold


async def test_a_multi_lock_is_lost_with_any_sub_lock(
    face: Face, five: list[RedisServer], name: str
) -> None:
    told: list[str] = []
    client = await face.connect(five[0].url, lock_watchdog_timeout=0.6)
    both = client.get_multi_lock(
        client.get_lock(f"{name}:a"),
        client.get_lock(f"{name}:b"),
        on_lost=lambda n, r: told.append(r),
    )
    a = face.actor()
    await a(both.lock)
    with pytest.raises(syncprims.LockNotHeldError):
        await face.actor()(both.ensure_held)  # another owner never held it
    raw = redis.Redis.from_url(five[0].url)
    raw.delete(f"{name}:b")
    raw.close()
    deadline = time.monotonic() + 5
    while not told and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(told) == 1 and await a(lambda: both.is_lost)
    with pytest.raises(LockNotHeldError):
        await a(both.unlock)


def test_a_multi_lock_made_per_use_leaves_nothing_on_its_sub_locks(
    redis_server: RedisServer, name: str
) -> None:
    """A sub-lock tells the MultiLocks made over it of its losses, holding them weakly: one
    made for each use and dropped leaves its sub-locks as they were, and one still in use
    is told of a loss of the hold it took (and of no other)."""
    client = syncprims.connect(redis_server.url, lock_watchdog_timeout=0.6)
    try:
        subs = [client.get_lock(f"{name}:{i}") for i in "ab"]
        for _ in range(50):
            with client.get_multi_lock(*subs):
                pass
        gc.collect()
        assert [len(sub._core.holds.watchers) for sub in subs] == [0, 0]
        told: list[str] = []
        kept = client.get_multi_lock(*subs, on_lost=lambda _, reason: told.append(reason))
        other = client.get_lock(f"{name}:c")  # lost too, but not a sub-lock of kept
        other.lock()
        kept.lock()
        raw = redis.Redis(port=redis_server.port)
        try:
            raw.delete(f"{name}:c")
            deadline = time.monotonic() + 5
            while not other.is_lost and time.monotonic() < deadline:
                time.sleep(0.02)
            assert other.is_lost and told == [] and not kept.is_lost
            raw.delete(f"{name}:b")
            deadline = time.monotonic() + 5
            while not told and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(told) == 1 and kept.is_lost
        finally:
            raw.close()
    finally:
        client.shutdown()


def test_a_release_whose_replies_are_all_still_to_come_is_retried_not_called_not_held(
    redis_server: RedisServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fan-out stops waiting with replies still to come (``PENDING``: its calls queued
    behind a server whose late lane was busy, under latency). Before, the unlock counted
    0 of 3 released and no error and said "not held" of a lock it held (the 30-minute
    campaign's MultiLock verdicts, and 2-4 per 25 s in a proxy-latency reproduction);
    now each such sub-lock's release is retried alone (idempotent by its latch key)."""
    client = syncprims.connect(redis_server.url)
    raw = redis.Redis(port=redis_server.port)
    try:
        lock = syncprims.MultiLock(*[client.get_lock(f"{name}:{i}") for i in "abc"])
        lock.lock()
        executor: Any = lock._core._ex
        fan_out = executor.eval_many
        stalled: list[int] = []

        async def first_one_stalls(calls: Any, enough: Any = None) -> list[Any]:
            if not stalled:  # the release's fan-out: nothing answered in time
                stalled.append(len(calls))
                return [PENDING] * len(calls)
            return list(await fan_out(calls, enough))

        monkeypatch.setattr(executor, "eval_many", first_one_stalls)
        lock.unlock()
        assert stalled == [3]
        assert [raw.exists(f"{name}:{i}") for i in "abc"] == [0, 0, 0]
    finally:
        client.shutdown()
        raw.close()
