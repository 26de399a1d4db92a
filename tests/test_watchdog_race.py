"""Unlock racing a renewal in flight: nothing of the watchdog acts after the unlock's reply.

Redisson #7272: the watchdog outlives ``unlock()`` through a cancel/schedule race (the
acquire's asynchronous ``scheduleExpirationRenewal`` runs after the unlock's
``cancelExpirationRenewal``, and the key's TTL keeps being renewed with no holder).

syncprims is immune to that ordering by design: the registration is made before the acquire
returns (``LockCore.acquired``), the cancel at the start of unlock, both under the watchdog's
mutex, and an abandoned acquire never registers; a renewal is collected only while its hold
is registered (``Watchdog._on_tick``).

One window remained, and these tests drove it: a renewal collected for a batch *before* the
cancel is sent, and may run in Redis, *after* the unlock's reply. Its script renews only
while the owner's field is in the hash, so it cannot recreate a deleted key nor extend
another owner's hold; but the same owner's next hold had the same field, and the late
``PEXPIRE`` set that hold's TTL to the watchdog timeout: a 20 s explicit lease was cut to
0.6 s, so the lock went to someone else while its holder still counted on 19 s. Fixed: a
hold dropped while a renewal call for it is unanswered is remembered until the reply
(``Watchdog.may_renew_late``), and ``Releases.fresh_field`` gives that owner's next hold a
new field (``<client>:<owner>.<n>``, as after a release with an unknown outcome), which the
late renewal does not name.

The deterministic tests hold the first renewal call between the watchdog collecting it and
sending it (a gate around the watchdog's script runner), unlock (and re-acquire) meanwhile,
then let it go. They fail if the cancel were racy (a renewal collected after the cancel, or
a cancel that does not stop a collected one from touching a later hold): checked by
breaking ``Watchdog.cancel`` and ``may_renew_late`` by hand.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest

from syncprims._protocol.contracts import ScriptCall, Then
from syncprims._services.watchdog import ScriptRunner, Watchdog
from tests.harness import Face, MakeLock, raw_redis, within

WATCHDOG = 0.6  # seconds: a renewal is due every 0.2 s
LEASE = 20.0  # seconds: the explicit lease of the hold that follows the unlock


class RenewalGate:
    """Wraps a watchdog's script runner: holds its first renewal call until :meth:`open`."""

    def __init__(self, watchdog: Watchdog) -> None:
        self._runner: ScriptRunner = watchdog._runner
        self.held = threading.Event()  # a renewal was collected and waits to be sent
        self.sent = threading.Event()  # ... and its reply came back
        self._open = threading.Event()
        watchdog._runner = self

    def open(self) -> None:
        self._open.set()

    async def _gate(self, context: str) -> bool:
        """Hold a renewal until :meth:`open`; ``True`` when this call was held."""
        if not context.startswith("renewing") or self._open.is_set():
            return False
        self.held.set()
        while not self._open.is_set():  # on the services loop (a thread, or the test's loop)
            await asyncio.sleep(0.002)
        return True

    async def eval(self, call: ScriptCall, *, context: str) -> object:
        held = await self._gate(context)
        try:
            return await self._runner.eval(call, context=context)
        finally:
            if held:
                self.sent.set()

    async def command(self, *args: str | int, context: str, route: str | None = None) -> object:
        return await self._runner.command(*args, context=context, route=route)

    async def eval_then(self, call: ScriptCall, then: Then, *, context: str) -> tuple[Any, Any]:
        # a renewal synced to replicas (a cluster with replicas: lock_synced_replicas "auto")
        held = await self._gate(context)
        try:
            return await self._runner.eval_then(call, then, context=context)
        finally:
            if held:
                self.sent.set()


async def until(event: threading.Event, seconds: float = 5.0) -> None:
    """Wait for ``event`` without blocking the loop (the asyncio face's watchdog runs on it)."""
    deadline = time.monotonic() + seconds
    while not event.is_set():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.002)


def watchdog_of(client: Any) -> Watchdog:
    watchdog = client._ex.watchdog
    assert isinstance(watchdog, Watchdog)
    return watchdog


@pytest.mark.parametrize("then", ["nobody", "same owner", "other owner", "other client"])
async def test_a_renewal_in_flight_at_unlock_acts_on_nothing_after_the_reply(
    face: Face, url: str, name: str, then: str
) -> None:
    losses: list[str] = []
    client = await face.connect(url, lock_watchdog_timeout=WATCHDOG)
    other = await face.connect(url)
    gate = RenewalGate(watchdog_of(client))
    lock = client.get_lock(name, on_lost=lambda _name, reason: losses.append(reason))
    a, b = face.actor(), face.actor()
    raw = raw_redis(url)
    try:
        await a(lock.lock)
        await until(gate.held)  # the first renewal is collected, not yet sent
        await a(lock.unlock)
        assert raw.exists(name) == 0
        if then == "same owner":
            await a(lock.lock, lease_time=LEASE)
        elif then == "other owner":
            await b(lock.lock, lease_time=LEASE)
        elif then == "other client":
            await b(other.get_lock(name).lock, lease_time=LEASE)
        gate.open()
        await until(gate.sent)  # the late renewal has run in Redis
        if then == "nobody":
            assert raw.exists(name) == 0, "a renewal recreated the key"
        else:
            assert raw.pttl(name) > (LEASE - 2) * 1000, "a late renewal cut the new lease"
        assert not losses  # the unlocked hold was not "lost"
        assert watchdog_of(client).lost == 0
    finally:
        raw.close()


LOCK_AND_READ_KINDS: dict[str, MakeLock] = {
    "rlock": lambda client, name: client.get_lock(name),
    "fair": lambda client, name: client.get_fair_lock(name),
    "read": lambda client, name: client.get_read_write_lock(name).read_lock(),
    "write": lambda client, name: client.get_read_write_lock(name).write_lock(),
    "fenced": lambda client, name: client.get_fenced_lock(name),
    "spin": lambda client, name: client.get_spin_lock(name),
}


@pytest.mark.parametrize("kind", list(LOCK_AND_READ_KINDS))
async def test_a_late_renewal_spares_the_same_owners_next_hold(
    face: Face, real_url: str, name: str, kind: str
) -> None:
    client = await face.connect(real_url, lock_watchdog_timeout=WATCHDOG)
    gate = RenewalGate(watchdog_of(client))
    lock = LOCK_AND_READ_KINDS[kind](client, name)
    a = face.actor()
    raw = raw_redis(real_url)
    try:
        await a(lock.lock)
        await until(gate.held)
        await a(lock.unlock)
        await a(lock.lock, lease_time=LEASE)
        gate.open()
        await until(gate.sent)
        assert raw.pttl(name) > (LEASE - 2) * 1000, "a late renewal cut the new lease"
        await asyncio.sleep(WATCHDOG)  # longer than the late renewal's lease: still held
        assert await a(lock.is_held_by_current_thread)
        await a(lock.unlock)
        assert raw.exists(name) == 0
    finally:
        raw.close()


async def test_unlocks_racing_renewals_never_cut_a_later_lease(face: Face, real_url: str) -> None:
    """Statistical: a watchdog timeout so short that renewals are always due (every 100 ms),
    and unlocks at random points of the renewal period, each followed by a hold with an
    explicit lease that no renewal may touch; bounded to about 3 s. The watchdog timeout
    (0.3 s) outlasts a loaded machine's scheduling delays, which no renewal can survive."""
    client = await face.connect(real_url, lock_watchdog_timeout=0.3)
    a = face.actor()
    raw = raw_redis(real_url)
    rng = random.Random(7272)
    names = [f"race:{i}:{time.monotonic_ns()}" for i in range(4)]

    def cycle(lock: Any, pause: float) -> None:
        lock.lock()
        time.sleep(pause)
        lock.unlock()
        lock.lock(lease_time=LEASE)

    async def acycle(lock: Any, pause: float) -> None:
        await lock.lock()
        await asyncio.sleep(pause)
        await lock.unlock()
        await lock.lock(lease_time=LEASE)

    try:
        cycles = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for n in names:
                lock = client.get_lock(n)
                pause = rng.uniform(0.0, 0.2)
                await within(5, a(acycle if face.is_async else cycle, lock, pause))
                cycles += 1
            await asyncio.sleep(0.15)  # more than a renewal period: late ones have run
            for n in names:
                assert raw.pttl(n) > (LEASE - 3) * 1000, f"a late renewal cut {n}'s lease"
                await a(client.get_lock(n).unlock)
        assert cycles >= 8
        assert watchdog_of(client).lost == 0
    finally:
        raw.close()
