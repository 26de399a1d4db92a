"""A least-privilege ACL user runs every primitive; names and scripts outside it are refused."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import redis
import redis.exceptions

import syncprims
from syncprims._embedded import RedisServer
from tests.faults.security.helpers import (
    ACL_CHANNELS,
    ACL_RULES,
    ADMIN_PASSWORD,
    USER,
    USER_PASSWORD,
    connect_rules,
    lock_waiter,
    plain_redis,
    until,
    wakes_on_message,
)

pytestmark = [pytest.mark.real, pytest.mark.faults]


# -- the least-privilege user -----------------------------------------------------------------


@dataclass
class AclServer:
    server: RedisServer
    admin: Any  # redis-py client of the default user
    rules: tuple[str, ...]  # ACL_RULES and the server's connect_rules()

    @property
    def user_url(self) -> str:
        return f"redis://{USER}:{USER_PASSWORD}@127.0.0.1:{self.server.port}"

    def acl_log(self) -> list[dict[str, Any]]:
        return list(self.admin.acl_log())


@pytest.fixture
def acl() -> Iterator[AclServer]:
    """A fresh redis-server whose user ``locker`` has exactly :data:`ACL_RULES` and the
    server's :func:`connect_rules`."""
    server = RedisServer(args=["--requirepass", ADMIN_PASSWORD])
    admin = plain_redis(server.port, password=ADMIN_PASSWORD)
    try:
        rules = (*ACL_RULES, *connect_rules(admin))
        admin.execute_command("ACL", "SETUSER", USER, *rules)
        admin.execute_command("ACL", "LOG", "RESET")
        yield AclServer(server, admin, rules)
    finally:
        admin.close()
        server.stop()


def _recorded(admin: Any, waiters: str) -> bool:
    return bool(admin.zcard(waiters))


def _exercise_waiters(client: syncprims.Client, admin: Any) -> None:
    """A waiter of each kind, woken by the pub/sub message of a release."""
    for lock in (client.get_lock("app:w-lock"), client.get_fenced_lock("app:w-fenced")):
        lock.lock(lease_time=30)
        # The RLock's release must find the wait recorded, or its one-wake branch (TIME,
        # ZREMRANGEBYSCORE: granted, so checked as used below) never runs: the waiter
        # subscribes before it records its wait. ZCARD: not granted, so the admin's calls
        # cannot count as the library's.
        waiters = f"syncprims_lock_waiters:{{{lock.name}}}"
        registered = partial(_recorded, admin, waiters) if lock.name == "app:w-lock" else None
        wakes_on_message(
            admin,
            f"redisson_lock__channel:{{{lock.name}}}",
            lock_waiter(lock),
            lock.unlock,
            registered,
        )

    fair = client.get_fair_lock("app:w-fair")
    fair.lock(lease_time=30)
    # The fair lock notifies each waiter on its own channel "...:{name}:<client id>:<owner>".
    wakes_on_message(admin, "redisson_lock__channel:{app:w-fair}:*", lock_waiter(fair), fair.unlock)
    # Two queued waiters; the first gives up (leaving the queue moves the second's
    # deadline forward), the second gets the lock.
    fair.lock(lease_time=30)
    # (ZCARD of the deadlines, not LLEN of the queue: the admin's commands count below)
    deadlines = "redisson_lock_timeout:{app:w-fair}"
    results: dict[str, bool] = {}

    def queued(label: str, wait_time: float) -> None:
        results[label] = lock_waiter(fair, wait_time)()

    quitter = threading.Thread(target=queued, args=("quitter", 1.0), daemon=True)
    quitter.start()
    until(lambda: admin.zcard(deadlines) == 1, 5, "the first fair waiter to queue")
    stayer = threading.Thread(target=queued, args=("stayer", 5.0), daemon=True)
    stayer.start()
    until(lambda: admin.zcard(deadlines) == 2, 5, "the second fair waiter to queue")
    quitter.join(5)
    assert results == {"quitter": False}
    assert admin.zcard(deadlines) == 1
    fair.unlock()
    stayer.join(5)
    assert results == {"quitter": False, "stayer": True}

    rw = client.get_read_write_lock("app:w-rw")
    rw.write_lock().lock(lease_time=30)
    wakes_on_message(
        admin, "redisson_rwlock:{app:w-rw}", lock_waiter(rw.read_lock()), rw.write_lock().unlock
    )

    sem = client.get_semaphore("app:w-sem")
    assert sem.try_set_permits(0)
    wakes_on_message(
        admin, "redisson_sc:{app:w-sem}", lambda: sem.try_acquire(wait_time=5), sem.release
    )

    pes = client.get_permit_expirable_semaphore("app:w-pes")
    assert pes.try_set_permits(1)
    held = pes.acquire()  # no lease: the waiter can only be woken by the release
    assert held is not None

    def pes_wait() -> bool:
        permit = pes.try_acquire(wait_time=5, lease_time=5)
        return permit is not None and pes.try_release(permit)

    wakes_on_message(admin, "redisson_sc:{app:w-pes}", pes_wait, lambda: pes.release(held))

    latch = client.get_count_down_latch("app:w-latch")
    assert latch.try_set_count(1)
    wakes_on_message(
        admin,
        "redisson_countdownlatch__channel__{app:w-latch}",
        lambda: latch.await_(timeout=5),
        latch.count_down,
    )


def _exercise_everything(client: syncprims.Client) -> None:
    """Every primitive, end to end, and the RObject operations."""
    lock = client.get_lock("app:lock")
    lock.lock()
    lock.lock()  # reentrant
    assert lock.is_locked() and lock.is_held_by_current_thread()
    assert lock.get_hold_count() == 2
    ttl = lock.remain_time_to_live()
    assert ttl is not None and ttl > 0
    assert lock.is_exists() and lock.touch()
    assert lock.expire(60) and lock.clear_expire()
    lock.unlock()
    lock.unlock()
    assert not lock.is_locked()
    lock.lock(lease_time=30)
    assert lock.force_unlock()

    fenced = client.get_fenced_lock("app:fenced")
    first = fenced.lock_and_get_token()
    fenced.unlock()
    second = fenced.try_lock_and_get_token(wait_time=1, lease_time=5)
    assert second == first + 1 == fenced.get_token()
    fenced.unlock()
    assert fenced.delete()

    rw = client.get_read_write_lock("app:rw")
    read, write = rw.read_lock(), rw.write_lock()
    read.lock()
    read.lock()
    assert read.is_locked() and not write.is_locked()
    read.unlock()
    read.unlock()
    write.lock()
    read.lock()  # a writer may also read
    read.unlock()
    write.unlock()
    assert not read.is_locked() and rw.is_exists() is False

    sem = client.get_semaphore("app:sem")
    assert sem.try_set_permits(2)
    sem.acquire()
    assert sem.try_acquire()
    assert not sem.try_acquire()
    assert sem.available_permits() == 0
    sem.release(2)
    assert sem.add_permits(1) == 3
    assert sem.drain_permits() == 3
    assert sem.delete()

    pes = client.get_permit_expirable_semaphore("app:pes")
    assert pes.try_set_permits(2)
    permit = pes.acquire(lease_time=30)
    assert permit is not None
    assert re.fullmatch(r"[0-9a-f]{32}", permit)
    assert pes.update_lease_time(permit, 60)
    assert (pes.available_permits(), pes.acquired_permits()) == (1, 1)
    pes.set_permits(3)
    pes.release(permit)
    expired = pes.try_acquire(lease_time=0.05)
    assert expired is not None
    time.sleep(0.1)
    assert pes.available_permits() == 3  # the expired lease was reclaimed
    assert pes.unlink()

    latch = client.get_count_down_latch("app:latch")
    assert latch.try_set_count(2)
    latch.count_down()
    assert latch.get_count() == 1
    assert not latch.await_(timeout=0.05)
    latch.count_down()
    assert latch.await_(timeout=1)
    assert latch.try_set_count(1)
    assert latch.delete()

    multi = client.get_multi_lock(client.get_lock("app:m1"), client.get_lock("app:m2"))
    assert multi.try_lock(wait_time=1, lease_time=10)
    assert multi.is_held_by_current_thread()
    multi.unlock()
    assert not multi.is_locked()

    election = client.get_leader_election("app:election", value="host-a")
    assert election.campaign(wait_time=2)
    leader = election.leader()
    assert leader is not None and leader.value == "host-a"
    election.proclaim("host-b")
    election.resign()
    assert election.leader() is None


def _exercise_watchdog(client: syncprims.Client, seconds: float) -> None:
    """Hold each lock kind through several watchdog renewals (leases of 1.5 s)."""
    rw = client.get_read_write_lock("app:dog-rw")
    rw2 = client.get_read_write_lock("app:dog-rw2")
    locks: list[syncprims.RLock] = [
        client.get_lock("app:dog-lock"),
        client.get_fair_lock("app:dog-fair"),
        client.get_fenced_lock("app:dog-fenced"),
        rw.read_lock(),
        rw2.write_lock(),
    ]
    for lock in locks:
        lock.lock()
    time.sleep(seconds)
    for lock in locks:
        lock.ensure_held()  # renewed, not expired
        lock.unlock()


def _command_counts(admin: Any) -> dict[str, int]:
    stats = admin.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if name.startswith("cmdstat_")
    }


def test_least_privilege_user_runs_every_primitive(acl: AclServer) -> None:
    acl.admin.config_resetstat()
    with syncprims.connect(
        acl.user_url, lock_watchdog_timeout=1.5, wait_recheck_interval=10
    ) as client:
        _exercise_everything(client)
        _exercise_waiters(client, acl.admin)
        _exercise_watchdog(client, seconds=2.0)  # also lets idle subscriptions be dropped
    # Nothing was refused, including what runs in the background (watchdog, janitor).
    assert acl.acl_log() == []
    assert acl.admin.keys("redisson_unlock_latch:*") == []  # cleaned up with UNLINK
    # Every command granted was needed: the rule set is not wider than the library's use.
    used = {name for name, calls in _command_counts(acl.admin).items() if calls}
    granted = {rule[1:] for rule in acl.rules if rule.startswith("+")}
    if not any("|" in name for name in used):
        # Redis 6 counts a subcommand's calls under its command ("script", not "script|load").
        granted = {rule.split("|")[0] for rule in granted}
    assert granted - used == set()


OUTSIDE: dict[str, Callable[[syncprims.Client], object]] = {
    "lock": lambda c: c.get_lock("other:x").lock(),
    "fair lock": lambda c: c.get_fair_lock("other:x").try_lock(wait_time=1),
    "fenced lock": lambda c: c.get_fenced_lock("other:x").lock_and_get_token(),
    "write lock": lambda c: c.get_read_write_lock("other:x").write_lock().lock(),
    "semaphore": lambda c: c.get_semaphore("other:x").try_set_permits(1),
    "permit-expirable semaphore": (
        lambda c: c.get_permit_expirable_semaphore("other:x").try_set_permits(1)
    ),
    "count-down latch": lambda c: c.get_count_down_latch("other:x").try_set_count(1),
    "read": lambda c: c.get_lock("other:x").is_locked(),
}


@pytest.mark.parametrize("operation", list(OUTSIDE))
def test_a_name_outside_the_users_patterns_is_refused(acl: AclServer, operation: str) -> None:
    with syncprims.connect(acl.user_url) as client:
        started = time.monotonic()
        with pytest.raises(syncprims.ServerReplyError) as info:
            OUTSIDE[operation](client)
        assert time.monotonic() - started < 2.0  # not retried: a refusal is final
    message = str(info.value)
    assert "'other:x'" in message  # names the object...
    assert "permission" in message  # ...and the cause (redis-py keeps no "NOPERM" prefix)
    assert USER_PASSWORD not in message and USER_PASSWORD not in repr(info.value)
    assert acl.admin.keys("*other:x*") == []  # nothing was written
    log = acl.acl_log()
    assert log and all(entry["username"] == USER for entry in log)
    assert {entry["reason"] for entry in log} == {"key"}


def test_scripts_cannot_step_outside_the_acl(acl: AclServer) -> None:
    """Granting EVALSHA and SCRIPT LOAD does not widen the user's rights: Redis checks every
    command a script calls, and every key it touches, against the same rules."""
    raw = plain_redis(acl.server.port, username=USER, password=USER_PASSWORD)
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            raw.eval("return 1", 0)  # no EVAL
        with pytest.raises(redis.exceptions.NoPermissionError):
            raw.keys("*")
        set_key = raw.script_load("return redis.call('set', KEYS[1], '1')")
        with pytest.raises(redis.exceptions.NoPermissionError):
            raw.evalsha(set_key, 1, "other:x")  # a declared key outside the patterns
        set_literal = raw.script_load("return redis.call('set', 'other:y', '1')")
        refused = redis.exceptions.ResponseError
        with pytest.raises(refused, match=r"(?i)can't access at least one of the keys|permission"):
            raw.evalsha(set_literal, 0)  # an undeclared key, checked at the call
        flush = raw.script_load("return redis.call('flushall')")
        with pytest.raises(refused, match=r"(?i)can't run this command|permission"):
            raw.evalsha(flush, 0)
        publish = raw.script_load("return redis.call('publish', 'other', '0')")
        with pytest.raises(refused, match=r"(?i)can't publish|permission"):
            raw.evalsha(publish, 0)
        assert raw.evalsha(set_key, 1, "app:allowed") == b"OK"  # the control
    finally:
        raw.close()
    assert acl.admin.keys("other:*") == []
    assert acl.admin.dbsize() == 1


def test_a_refused_subscription_does_not_make_the_client_reconnect_in_a_loop(
    acl: AclServer,
) -> None:
    channels = [c for c in ACL_CHANNELS if not c.startswith("&redisson_lock__channel:")]
    rules = [r for r in acl.rules if not r.startswith("&")]
    acl.admin.execute_command("ACL", "SETUSER", USER, *rules, "resetchannels", *channels)
    with syncprims.connect(acl.user_url, wait_recheck_interval=10) as client:
        lock = client.get_lock("app:refused")
        lock.lock(lease_time=30)
        connections = int(acl.admin.info("stats")["total_connections_received"])
        got: list[object] = []

        def wait() -> None:
            try:
                got.append(lock.try_lock(wait_time=1.0))
            except syncprims.SyncPrimsError as error:
                got.append(error)

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        thread.join(5)
        reconnects = int(acl.admin.info("stats")["total_connections_received"]) - connections
        # (no unlock: it publishes on the refused channel; the server is dropped anyway)
    # The waiter is told, with a typed error naming the channel; the connection is kept.
    assert len(got) == 1 and isinstance(got[0], syncprims.ServerReplyError), got
    assert "refused to subscribe" in str(got[0]) and "redisson_lock__channel" in str(got[0])
    assert reconnects <= 1, f"{reconnects} new connections in about 1 s"


def test_an_acl_from_before_the_direct_grant_keeps_working(
    acl: AclServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The least-privilege rules of the release before the direct grant (no
    ``~syncprims_lock_handoff:``, ``+blpop``, ``+lpush``, ``+pubsub|numsub``): the RLock's
    unlock script is refused before it runs (its grant-list prefix is in KEYS), the client
    falls back to Redisson's scripts and wake-ups, and every waiter is still woken."""
    newer = {"~syncprims_lock_handoff:{app:*", "+blpop", "+lpush", "+pubsub|numsub"}
    rules = [r for r in acl.rules if r not in newer]
    assert len(rules) == len(acl.rules) - len(newer)
    acl.admin.execute_command("ACL", "SETUSER", USER, "reset", *rules)
    with syncprims.connect(acl.user_url, wait_recheck_interval=10) as client:
        lock = client.get_lock("app:old-acl")
        lock.lock(lease_time=30)
        wakes_on_message(
            acl.admin, "redisson_lock__channel:{app:old-acl}", lock_waiter(lock), lock.unlock
        )
        for _ in range(3):  # after the fall-back: plain Redisson locking
            assert lock.try_lock(wait_time=1, lease_time=5)
            lock.unlock()
        assert not lock.is_locked()
    assert "falling back to Redisson's wake-ups" in caplog.text
