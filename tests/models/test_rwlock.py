"""ReadWriteLock as a state machine: four explicit owners (two per client) taking both sides,
reentrantly, by the watchdog or with a lease, against a real server that the rules restart
empty, evict, expire and force-unlock (either side), with unlock replies lost; one client,
holding by the watchdog only, may crash (stop renewing).

Invariants, after every step: Redis holds exactly the model (``mode``, each reader's and the
writer's hold count), so at most one writer and no reader beside it but itself; every read
hold has its lease key (the lock's TTL is computed from them when a reader leaves); a hold
still there is told nothing. Within each step: a lost hold is told once per side, as in
``test_locks.py``; an unlock whose reply was lost counts once; a reader cannot upgrade;
releasing the write side while holding read holds downgrades to read mode; a crashed
client's holds end with their lease and take nothing else with them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import stateful
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from syncprims import LockNotHeldError
from syncprims._embedded import RedisServer
from syncprims._protocol.names import rw_lease_prefix
from syncprims._services import watchdog
from tests.harness import raw_redis
from tests.models.helpers import SETTINGS, Face, Hold, all_lost, evict_leases, losing_reply

pytestmark = pytest.mark.real

WATCHDOG, LEASE = 2.0, 30.0  # s, as in test_locks.py
OWNERS = 4
OWNER = st.integers(0, OWNERS - 1)
SIDES = ("read", "write")
SIDE = st.sampled_from(SIDES)
WAIT = st.sampled_from([0.0, 0.05])


class ReadWrite(RuleBasedStateMachine):
    server: RedisServer

    def __init__(self) -> None:
        super().__init__()
        self.face = Face("sync")
        self.raw = raw_redis(self.server.url)
        self.raw.flushall()
        self.name = f"model:{uuid.uuid4().hex[:8]}"
        self.admin = self.face.connect(self.server.url).get_read_write_lock(self.name)
        self.holds = [{side: Hold() for side in SIDES} for _ in range(OWNERS)]
        self.owners: list[tuple[Any, Any, dict[str, Any]]] = []  # client, owner, its sides
        self.clients = [self.connect(0), self.connect(1)]
        # Read fields of a crashed client, left in the hash while live readers renew it
        # (their lease keys expired: the last live reader's unlock deletes them with it).
        self.zombies: dict[str, str] = {}

    def connect(self, c: int) -> Any:
        """Client ``c`` and its two owners (new ones after a crash). Each side is taken
        through a lock object of its own, so that each side's ``on_lost`` is told apart."""
        client = self.face.connect(self.server.url, lock_watchdog_timeout=WATCHDOG)
        for i in (2 * c, 2 * c + 1):
            sides = {
                s: getattr(
                    client.get_read_write_lock(self.name, on_lost=self.holds[i][s].told),
                    f"{s}_lock",
                )()
                for s in SIDES
            }
            entry = (client, client.new_owner(), sides)
            if i < len(self.owners):
                self.owners[i] = entry
            else:
                self.owners.append(entry)
        return client

    def teardown(self) -> None:
        self.face.close()
        self.raw.close()

    def call(self, i: int, side: str, method: str, *args: Any) -> Any:
        lock = self.owners[i][2][side]
        return self.face.run(getattr(lock, method)(*args, owner=self.owners[i][1]))

    def field(self, i: int, side: str) -> str:
        return str(self.owners[i][2][side]._core.field(self.owners[i][1].value))

    def all_holds(self) -> list[Hold]:
        return [hold for sides in self.holds for hold in sides.values()]

    def writer(self) -> int | None:
        return next((i for i in range(OWNERS) if self.holds[i]["write"].count), None)

    def holding(self) -> list[int]:
        return [i for i in range(OWNERS) if any(h.count for h in self.holds[i].values())]

    @rule(i=OWNER, side=SIDE, watchdog=st.booleans(), wait=WAIT)
    def acquire(self, i: int, side: str, watchdog: bool, wait: float) -> None:
        writer = self.writer()
        if side == "read":
            free = writer in (None, i)
        else:  # no upgrade: the owner's own read holds keep it out too
            free = writer == i or (writer is None and not self.holding() and not self.zombies)
        got = self.call(i, side, "try_lock", wait, None if watchdog else LEASE)
        assert got == free, f"owner {i} {side} got {got}, writer {writer}"
        if got:
            self.holds[i][side].acquired(self.field(i, side), watchdog=watchdog)

    @rule(i=OWNER, side=SIDE, lose_reply=st.booleans())
    def release(self, i: int, side: str, lose_reply: bool) -> None:
        losing = losing_reply(self.owners[i][0]) if lose_reply else contextlib.nullcontext()
        with losing:
            if self.holds[i][side].count:
                self.call(i, side, "unlock")
            else:
                with pytest.raises(LockNotHeldError):
                    self.call(i, side, "unlock")
        self.holds[i][side].unlocked()
        if not self.holding():
            self.zombies = {}

    @precondition(lambda self: self.holding())
    @rule(side=SIDE)
    def force_unlock(self, side: str) -> None:
        mode = "write" if self.writer() is not None else "read"
        lock = self.admin.read_lock() if side == "read" else self.admin.write_lock()
        assert self.face.run(lock.force_unlock()) == (side == mode)
        if side == mode:
            self.lost(data_lost=False)

    @precondition(lambda self: self.holding())
    @rule()
    def expire(self) -> None:
        self.raw.pexpire(self.name, 1)
        assert self.face.wait_for(lambda: not self.raw.exists(self.name), 2)
        self.lost(data_lost=False)

    @precondition(lambda self: self.holding())
    @rule()
    def restart_empty(self) -> None:
        self.server.restart()
        self.lost(data_lost=True)

    @precondition(lambda self: self.holding())
    @rule()
    def evict(self) -> None:
        assert evict_leases(self.raw) >= 1
        self.lost(data_lost=True)

    @precondition(
        lambda self: (
            any(h.count for i in (2, 3) for h in self.holds[i].values())
            and not any(h.count and h.leased for i in (2, 3) for h in self.holds[i].values())
        )
    )
    @rule()
    def crash(self) -> None:
        """Client 1, holding by the watchdog only, stops: nothing renews its holds, which
        end with their lease (a read field stays in the hash while live readers renew it,
        its lease keys gone: a zombie, deleted with the last live read hold), and nothing
        else goes with them."""
        crashed = [h for i in (2, 3) for h in self.holds[i].values() if h.count]
        writes = {h.field for h in crashed if h.field.endswith(":write")}
        leases = [
            self.lease_key(h.field, n)
            for h in crashed
            if h.field not in writes
            for n in range(1, h.count + 1)
        ]
        self.face.run(self.clients[1].shutdown())

        def ended() -> bool:
            return not (leases and self.raw.exists(*leases)) and not writes & self.stored().keys()

        assert self.face.wait_for(ended, WATCHDOG + 2)
        for i in (2, 3):
            self.holds[i] = {side: Hold() for side in SIDES}
        self.clients[1] = self.connect(1)
        live = {h.field for h in self.all_holds() if h.count}
        self.zombies = {k: v for k, v in self.stored().items() if k != "mode" and k not in live}

    def lost(self, *, data_lost: bool) -> None:
        all_lost(self.face, self.all_holds(), data_lost=data_lost)
        self.zombies = {}  # the hash is gone

    def lease_key(self, field: str, n: int) -> str:
        return f"{rw_lease_prefix(self.name, field)}:{n}"

    def stored(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.raw.hgetall(self.name).items()}

    @invariant()
    def redis_holds_the_model(self) -> None:
        stored = self.stored()
        writers = [f for f in stored if f.endswith(":write")]
        assert len(writers) <= 1, f"two writers: {stored}"
        if writers:  # no reader beside the writer but itself
            assert set(stored) <= {"mode", writers[0], writers[0].removesuffix(":write")}
        expected = {h.field: str(h.count) for h in self.all_holds() if h.count} | self.zombies
        if expected:
            expected["mode"] = "write" if self.writer() is not None else "read"
        assert stored == expected
        for sides in self.holds:  # every read hold has its lease key
            read = sides["read"]
            for n in range(1, read.count + 1):
                assert self.raw.pttl(self.lease_key(read.field, n)) > 0, f"{read.field}: no lease"

    @invariant()
    def holds_are_told_only_of_losses(self) -> None:
        for hold in self.all_holds():
            hold.heard(required=False)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    monkeypatch.setattr(watchdog, "CHECK_INTERVAL", 0.1)  # as in test_locks.py
    with RedisServer() as server:
        yield server


def test_read_write_lock(server: RedisServer) -> None:
    machine = type("ReadWriteRun", (ReadWrite,), {"server": server})
    stateful.run_state_machine_as_test(machine, settings=SETTINGS(examples=8, steps=25))


def test_a_stopped_readers_renewal_does_not_end_another_readers_lease(
    server: RedisServer,
) -> None:
    face = Face("sync")
    raw = raw_redis(server.url)
    try:
        leased = face.connect(server.url)
        renewed = face.connect(server.url, lock_watchdog_timeout=1)
        name = f"model:{uuid.uuid4().hex[:8]}"
        reader = leased.get_read_write_lock(name).read_lock()
        assert reader.try_lock(0, LEASE, owner=leased.new_owner())  # 30 s
        assert renewed.get_read_write_lock(name).read_lock().try_lock(0, owner=renewed.new_owner())
        face.wait_for(lambda: raw.pttl(name) < 2000, 5)  # renewed once
        renewed.shutdown()  # stops renewing (a crash, as Redis sees it)
        face.wait_for(lambda: not raw.exists(name), 5)
        writer = leased.get_read_write_lock(name).write_lock()
        assert not writer.try_lock(0, LEASE, owner=leased.new_owner()), (
            "a writer entered while a reader's 30 s lease ran"
        )
    finally:
        face.close()
        raw.close()


@pytest.mark.parametrize("side", ["read", "write"])
def test_a_retried_unlock_of_a_lost_hold_raises(server: RedisServer, side: str) -> None:
    face = Face("sync")
    raw = raw_redis(server.url)
    try:
        client = face.connect(server.url)
        name = f"model:{uuid.uuid4().hex[:8]}"
        rw = client.get_read_write_lock(name)
        lock, owner = (rw.read_lock() if side == "read" else rw.write_lock()), client.new_owner()
        assert lock.try_lock(0, LEASE, owner=owner)
        raw.delete(name)  # lost (an empty restart, an eviction, an expiry)
        with losing_reply(client), pytest.raises(LockNotHeldError):
            lock.unlock(owner=owner)
    finally:
        face.close()
        raw.close()
