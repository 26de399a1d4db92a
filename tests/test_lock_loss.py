"""Lock-loss notification: on_lost, is_lost, ensure_held and hold_or_cancel."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from typing import Any

import pytest

import syncprims
import syncprims.asyncio
from syncprims import LockLostError, LockNotHeldError
from syncprims._embedded import RedisServer
from syncprims._protocol.kinds import KINDS, make
from syncprims._protocol.timing import clock
from tests.conftest import LOCK_KINDS
from tests.harness import Face, MakeLock


async def test_a_watchdog_loss_is_reported(
    face: Face, url: str, name: str, make_lock: MakeLock
) -> None:
    reports: list[tuple[str, str]] = []
    reported = threading.Event()

    def on_lost(lost_name: str, reason: str) -> None:
        reports.append((lost_name, reason))
        reported.set()

    client = await face.connect(url, lock_watchdog_timeout=0.6)
    other = await face.connect(url)
    mine, theirs = make_lock(client, name, on_lost=on_lost), make_lock(other, name)
    a, b = face.actor(), face.actor()
    await a(mine.lock)
    assert not await a(lambda: mine.is_lost)
    await a(mine.ensure_held)
    await b(theirs.force_unlock)  # someone breaks the lock
    assert await asyncio.get_running_loop().run_in_executor(None, reported.wait, 5)
    assert reports[0][0] == name
    assert "no longer holds" in reports[0][1]
    assert await a(lambda: mine.is_lost)
    with pytest.raises(LockLostError) as info:
        await a(mine.ensure_held)
    assert info.value.name == name
    with pytest.raises(LockNotHeldError):
        await a(mine.unlock)
    await a(mine.lock)  # a new hold is not lost
    assert not await a(lambda: mine.is_lost)
    await a(mine.unlock)


async def test_an_explicit_lease_is_lost_when_it_runs_out(
    face: Face, client: Any, name: str
) -> None:
    lock = client.get_lock(name)
    a = face.actor()
    with pytest.raises(LockNotHeldError):
        await a(lock.ensure_held)  # never acquired: not "lost"
    await a(lock.lock, 0.3)
    assert not await a(lambda: lock.is_lost)
    await asyncio.sleep(0.45)
    assert await a(lambda: lock.is_lost)
    with pytest.raises(LockLostError, match="lease ran out"):
        await a(lock.ensure_held)


def test_renewals_failing_past_the_lease_are_reported() -> None:
    reports: list[str] = []
    with (
        RedisServer() as server,
        syncprims.connect(server.url, lock_watchdog_timeout=1, timeout=0.2) as client,
    ):
        lock = client.get_lock("frozen", on_lost=lambda _name, reason: reports.append(reason))
        lock.lock()
        server.pause()  # Redis answers nothing: every renewal fails
        try:
            deadline = time.monotonic() + 5
            while not reports and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            server.resume()
        assert reports, "the loss was not reported"
        assert "could not be renewed" in reports[0]
        assert lock.is_lost


def test_a_lease_with_no_renewal_reply_is_reported_a_margin_before_it_ends() -> None:
    """The report of a renewal that got no reply is a timer, which a loaded host runs late:
    it is due 5 % of the lease (plus the 1 % + 2 ms drift allowance) before the lease's end
    counted from the acquire's send, so that some scheduling delay still leaves it before
    Redis's expiry (the 30-minute campaign: a report due at the end itself came 4.5 ms
    after another client's grant). With a 6 s lease, due 0.362 s before the end; the
    assertion leaves 0.16 s of delay (due at the end less the drift alone, 5.938 s, it fails)."""
    told: list[float] = []
    lease = 6.0
    with (
        RedisServer() as server,
        syncprims.connect(server.url, lock_watchdog_timeout=lease, timeout=0.5) as client,
    ):
        lock = client.get_lock("frozen", on_lost=lambda _name, _reason: told.append(clock()))
        sent = clock()
        lock.lock()
        server.pause()  # the renewal at a third of the lease gets no reply
        try:
            deadline = time.monotonic() + lease + 2
            while not told and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            server.resume()
        assert told, "the loss was not reported"
        assert told[0] - sent < lease - 0.2, f"reported {told[0] - sent:.3f} s after the acquire"
        assert told[0] - sent > lease / 3  # not before the first renewal could have answered


def test_an_unlocked_hold_leaves_the_watchdogs_wheel_at_the_next_tick(real_url: str) -> None:
    """An unlocked hold's renewal leaves the timing wheel at the watchdog's next tick, not a
    renewal period later (30 s / 3 here): under thousands of tasks the dead entries kept
    that long were most of what the collector walked (docs/design.md)."""
    with syncprims.connect(real_url) as client:
        watchdog = client._ex.watchdog
        wheel = watchdog._wheel
        locks = [client.get_lock(f"wheel:{uuid.uuid4().hex}") for _ in range(3)]
        for lock in locks:
            lock.lock()
        deadline = time.monotonic() + 5
        while len(wheel) < len(locks) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(wheel) == len(locks), "the holds were not put on the wheel"
        locks[0].unlock()
        deadline = time.monotonic() + 5
        while len(wheel) > len(locks) - 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(wheel) == len(locks) - 1
        assert len(watchdog) == len(locks) - 1  # the others are still renewed
        for lock in locks[1:]:
            lock.unlock()
        deadline = time.monotonic() + 5
        while len(wheel) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(wheel) == 0
        assert len(watchdog) == 0


def test_on_lost_must_be_callable(real_url: str) -> None:
    with syncprims.connect(real_url) as client, pytest.raises(TypeError, match="callable"):
        client.get_lock("x", on_lost="not callable")  # type: ignore[arg-type]


def test_hold_or_cancel_cancels_the_block_when_the_lock_is_lost(real_url: str) -> None:
    async def main() -> None:
        client = await syncprims.asyncio.connect(real_url, lock_watchdog_timeout=0.6)
        other = await syncprims.asyncio.connect(real_url)
        name = f"hold:{uuid.uuid4().hex}"
        lock = client.get_lock(name)
        reached: list[str] = []

        async def body() -> None:
            async with lock.hold_or_cancel():
                reached.append("inside")
                await other.get_lock(name).force_unlock()  # someone breaks it
                await asyncio.sleep(10)  # the loss must cancel this
                reached.append("not reached")

        start = time.monotonic()
        with pytest.raises(LockLostError):
            await asyncio.wait_for(body(), 8)
        assert time.monotonic() - start < 3
        assert reached == ["inside"]
        await client.shutdown()
        await other.shutdown()

    asyncio.run(main())


def test_hold_or_cancel_with_a_lease_and_normal_exits(real_url: str) -> None:
    async def main() -> None:
        client = await syncprims.asyncio.connect(real_url)
        lock = client.get_lock(f"hold:{uuid.uuid4().hex}")
        # the block outlives its lease: cancelled when the lease runs out
        with pytest.raises(LockLostError, match="lease ran out"):
            async with lock.hold_or_cancel(lease_time=0.3):
                await asyncio.sleep(5)
        # a normal block: released at the end
        async with lock.hold_or_cancel():
            assert await lock.is_held_by_current_thread()
        assert not await lock.is_locked()
        # an error in the block: released, the error propagates
        with pytest.raises(KeyError):
            async with lock.hold_or_cancel():
                raise KeyError("boom")
        assert not await lock.is_locked()

        # cancelled from outside: released, the cancellation propagates
        async def held_forever() -> None:
            async with lock.hold_or_cancel():
                await asyncio.sleep(10)

        task = asyncio.ensure_future(held_forever())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not await lock.is_locked()
        await client.shutdown()

    asyncio.run(main())


@pytest.mark.parametrize("outcome", ["renewed", "failed"])
async def test_a_hold_unlocked_while_its_renewal_is_out_stays_off_the_wheel(
    outcome: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hold unlocked while a renewal call for it is unanswered does not go back on the
    timing wheel when the reply (or the failure) comes: it would stay there, dead, for a
    renewal period."""
    from syncprims._core.lock import LOCK_RENEWAL
    from syncprims._protocol.contracts import ScriptCall
    from syncprims._services.watchdog import Watchdog

    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[object]] = []

    class Services:
        def call_soon(self, fn: Any, *args: Any) -> None:
            loop.call_soon(fn, *args)

        def spawn(self, coro: Any) -> None:
            tasks.append(loop.create_task(coro))

    sent, answer = asyncio.Event(), asyncio.Event()

    class Runner:
        async def eval(self, call: ScriptCall, *, context: str) -> object:
            sent.set()
            await answer.wait()
            if outcome == "failed":
                raise ConnectionError("no reply")
            return [1, 1]

        async def command(self, *args: str | int, context: str, route: str | None = None) -> object:
            return b"run_id:one\r\nevicted_keys:0\r\n"  # INFO: a server that kept its data

        async def eval_then(self, call: ScriptCall, then: Any, *, context: str) -> tuple[Any, Any]:
            raise AssertionError("no replica sync was asked for")

    # A renewal period of 1 s and a retry 1 s later: "kept" stays on the wheel while the
    # test looks, however slow the loop is at that moment.
    watchdog = Watchdog(Services(), Runner(), lease=3.0, batch_size=10, retry_delay=1.0)
    try:
        watchdog.register("kept", "owner:1", kind=LOCK_RENEWAL)
        watchdog.register("unlocked", "owner:1", kind=LOCK_RENEWAL)
        await asyncio.wait_for(sent.wait(), 5)  # both are in the call now
        assert len(watchdog._wheel) == 0
        watchdog.cancel("unlocked", "owner:1")
        assert watchdog.may_renew_late("unlocked", "owner:1")
        answer.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert len(watchdog._wheel) == 1, "the unlocked hold went back on the wheel"
        assert watchdog.lease_end("kept", "owner:1") is not None
        # A failed call may still run in Redis: its hold stays remembered (module docstring).
        assert watchdog.may_renew_late("unlocked", "owner:1") == (outcome == "failed")
        if outcome == "failed":
            # ... but not for ever: no copy of it can arrive later than LATE_COPY after it
            # was sent, and a later drop forgets it then (the memory stays bounded).
            from syncprims._protocol.timing import LATE_COPY, clock
            from syncprims._services import watchdog as watchdog_module

            later = clock() + LATE_COPY + 1
            monkeypatch.setattr(watchdog_module, "clock", lambda: later)
            other = watchdog_module._Renewal("other", "owner:2", later, LOCK_RENEWAL, 30.0)
            other.unanswered = 1  # its renewal failed too
            watchdog._renewals[("other", "owner:2")] = other
            with watchdog._mutex:
                watchdog._drop(other)
            assert not watchdog.may_renew_late("unlocked", "owner:1")
            assert watchdog.may_renew_late("other", "owner:2")
    finally:
        watchdog.aclose()


ALL_KINDS: dict[str, MakeLock] = {
    **LOCK_KINDS,
    "read": functools.partial(make, KINDS["read"]),
}


@pytest.mark.parametrize(
    ("kind", "holds"),
    [("lock", 1), ("lock", 2), *[(kind, 3) for kind in ALL_KINDS]],
)
async def test_one_loss_is_reported_once_whatever_the_hold_count(
    face: Face, url: str, name: str, kind: str, holds: int
) -> None:
    """A hold taken ``holds`` times and then lost calls ``on_lost`` once, tells a loss
    listener once and counts one loss: an alert or a compensating action runs once."""
    reports: list[str] = []
    heard: list[object] = []
    reported = threading.Event()

    def on_lost(_name: str, reason: str) -> None:
        reports.append(reason)
        reported.set()

    client = await face.connect(url, lock_watchdog_timeout=0.6)
    other = await face.connect(url)
    mine = ALL_KINDS[kind](client, name, on_lost=on_lost)
    a = face.actor()
    owner = client.new_owner()
    for _ in range(holds):
        await a(mine.lock, owner=owner)
    mine._core.holds.add_loss_listener(owner.value, heard.append)
    await face.actor()(ALL_KINDS[kind](other, name).force_unlock)
    assert await asyncio.get_running_loop().run_in_executor(None, reported.wait, 5)
    await asyncio.sleep(0.6)  # three renewal periods more: nothing is reported again
    assert len(reports) == 1, reports
    assert len(heard) == 1, heard
    assert client._ex.watchdog.lost == 1
    assert mine._core.holds.lost_reason(owner.value) is not None
