"""Security: a least-privilege ACL user, failed authentication, TLS, unguessable owner ids,
and scripts that take every key from ``KEYS``.

The ACL rules below (:data:`ACL_KEYS`, :data:`ACL_CHANNELS`, :data:`ACL_COMMANDS`) are the
smallest set found that lets every primitive work, waits included, for objects named
``app:...``; :func:`test_least_privilege_user_runs_every_primitive` proves both halves
(everything works, and Redis used every command granted). Replace ``app:`` by your own
prefix. Names that already hold a hash tag (``{app}:x``) derive other key names (see
``redisson-spec.md`` 1.1) and need other patterns.
"""

from __future__ import annotations

import gc
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

import syncprims
from syncprims._embedded import RedisServer, free_port
from syncprims._protocol import ids
from syncprims._protocol.timing import Bounds
from tests.harness import raw_command

pytestmark = [pytest.mark.real, pytest.mark.faults]

USER = "locker"
USER_PASSWORD = "locker-pw-7f3a"
ADMIN_PASSWORD = "admin-pw-91c2"

# -- the ACL rule set -------------------------------------------------------------------------

ACL_KEYS = (
    "~app:*",  # the objects: lock hashes, semaphore and latch counters
    "~{app:*",  # "{name}:..." keys: read-lock leases, permit-expirable semaphore leases
    "~redisson_lock_queue:{app:*",  # fair lock: wait queue
    "~redisson_lock_timeout:{app:*",  # fair lock: waiter deadlines
    "~redisson_lock_token:{app:*",  # fenced lock: token counter
    "~redisson_unlock_latch:{app:*",  # every lock kind: unlock idempotency keys
    # The scripts that publish get the channel in KEYS (Redisson's layout, for cluster
    # routing), and Redis checks every KEYS entry against the key patterns:
    "~redisson_lock__channel:{app:*",
    "~redisson_rwlock:{app:*",
    "~redisson_sc:{app:*",
)
"""Key patterns (``~``) of the ACL user."""

ACL_CHANNELS = (
    "&redisson_lock__channel:{app:*",  # RLock, FencedLock, FairLock (and its per-waiter channels)
    "&redisson_rwlock:{app:*",  # ReadWriteLock
    "&redisson_sc:{app:*",  # Semaphore, PermitExpirableSemaphore
    "&redisson_countdownlatch__channel__{app:*",  # CountDownLatch (given in ARGV, not KEYS)
)
"""Pub/sub channel patterns (``&``) of the ACL user."""

ACL_COMMANDS = (
    "-@all",
    "+ping",  # connect() checks the server; the pub/sub connection's keep-alive
    "+info",  # lock_synced_replicas="auto" (the default) counts the replicas (INFO replication)
    "+evalsha",  # every operation that changes state is a script...
    "+script|load",  # ...loaded on NOSCRIPT (no EVAL: the scripts are never sent inline)
    "+subscribe",  # waits (lock(), acquire(), await_())
    "+unsubscribe",  # a subscription idle for a second is dropped
    # plain reads and RObject operations
    "+get", "+hget", "+hexists", "+hlen", "+pttl", "+exists",
    "+del", "+unlink", "+touch",  # delete()/unlink()/touch(); unlock-latch clean-up (UNLINK)
    # called from the scripts (Redis checks them there too)
    "+publish",
    "+set", "+incr", "+incrby", "+decr", "+decrby",
    "+hset", "+hdel", "+hincrby", "+hkeys",
    "+pexpire", "+persist",
    "+lindex", "+lpop", "+lrange", "+lrem", "+rpush",
    "+zadd", "+zcount", "+zincrby", "+zrange", "+zrangebyscore", "+zrem", "+zscore",
)  # fmt: skip
"""Commands of the ACL user. Not granted here, and needed only by some features: ``+wait``
(``Config.lock_synced_replicas``, where the master has replicas), ``+pexpireat``
(``expire_at()``); a cluster also needs ``+cluster|slots``, ``+asking``, ``+spublish``,
``+ssubscribe``, ``+sunsubscribe`` and ``+pubsub|shardnumsub``."""

ACL_RULES = ("reset", "on", f">{USER_PASSWORD}", *ACL_KEYS, *ACL_CHANNELS, *ACL_COMMANDS)
"""``ACL SETUSER locker <rules>``."""


def _redis(port: int, **options: Any) -> Any:
    """A plain redis-py client (typed ``Any``: redis-py's reply types are a union with
    ``Awaitable``)."""
    return redis.Redis(port=port, socket_timeout=5, **options)


def _until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


# -- the least-privilege user -----------------------------------------------------------------


@dataclass
class AclServer:
    server: RedisServer
    admin: Any  # redis-py client of the default user

    @property
    def user_url(self) -> str:
        return f"redis://{USER}:{USER_PASSWORD}@127.0.0.1:{self.server.port}"

    def acl_log(self) -> list[dict[str, Any]]:
        return list(self.admin.acl_log())


@pytest.fixture
def acl() -> Iterator[AclServer]:
    """A fresh redis-server whose user ``locker`` has exactly :data:`ACL_RULES`."""
    server = RedisServer(args=["--requirepass", ADMIN_PASSWORD])
    admin = _redis(server.port, password=ADMIN_PASSWORD)
    try:
        admin.execute_command("ACL", "SETUSER", USER, *ACL_RULES)
        admin.execute_command("ACL", "LOG", "RESET")
        yield AclServer(server, admin)
    finally:
        admin.close()
        server.stop()


def _wakes_on_message(
    admin: Any, channel_glob: str, wait: Callable[[], bool], release: Callable[[], object]
) -> None:
    """Run ``wait`` in a thread; once it is subscribed to a channel matching ``channel_glob``,
    ``release`` what it waits for, and check it returns ``True`` promptly.

    The caller holds with a 30 s lease and the client re-checks every 10 s at most: a return
    within 2 s of the release means the pub/sub message woke the waiter.
    """
    result: list[object] = []

    def run() -> None:
        try:
            result.append(wait())
        except BaseException as error:
            result.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _until(lambda: admin.pubsub_channels(channel_glob), 5, f"a subscriber of {channel_glob}")
    released = time.monotonic()
    release()
    thread.join(5)
    woken_after = time.monotonic() - released
    assert not thread.is_alive(), f"the waiter on {channel_glob} is still waiting"
    assert result == [True], result
    assert woken_after < 2.0, f"the waiter on {channel_glob} woke {woken_after:.2f} s late"


def _lock_waiter(lock: syncprims.RLock, wait_time: float = 5.0) -> Callable[[], bool]:
    def wait() -> bool:
        acquired = lock.try_lock(wait_time=wait_time, lease_time=5)
        if acquired:
            lock.unlock()
        return acquired

    return wait


def _exercise_waiters(client: syncprims.Client, admin: Any) -> None:
    """A waiter of each kind, woken by the pub/sub message of a release."""
    for lock in (client.get_lock("app:w-lock"), client.get_fenced_lock("app:w-fenced")):
        lock.lock(lease_time=30)
        _wakes_on_message(
            admin, f"redisson_lock__channel:{{{lock.name}}}", _lock_waiter(lock), lock.unlock
        )

    fair = client.get_fair_lock("app:w-fair")
    fair.lock(lease_time=30)
    # The fair lock notifies each waiter on its own channel "...:{name}:<client id>:<owner>".
    _wakes_on_message(
        admin, "redisson_lock__channel:{app:w-fair}:*", _lock_waiter(fair), fair.unlock
    )
    # Two queued waiters; the first gives up (leaving the queue moves the second's
    # deadline forward), the second gets the lock.
    fair.lock(lease_time=30)
    # (ZCARD of the deadlines, not LLEN of the queue: the admin's commands count below)
    deadlines = "redisson_lock_timeout:{app:w-fair}"
    results: dict[str, bool] = {}

    def queued(label: str, wait_time: float) -> None:
        results[label] = _lock_waiter(fair, wait_time)()

    quitter = threading.Thread(target=queued, args=("quitter", 1.0), daemon=True)
    quitter.start()
    _until(lambda: admin.zcard(deadlines) == 1, 5, "the first fair waiter to queue")
    stayer = threading.Thread(target=queued, args=("stayer", 5.0), daemon=True)
    stayer.start()
    _until(lambda: admin.zcard(deadlines) == 2, 5, "the second fair waiter to queue")
    quitter.join(5)
    assert results == {"quitter": False}
    assert admin.zcard(deadlines) == 1
    fair.unlock()
    stayer.join(5)
    assert results == {"quitter": False, "stayer": True}

    rw = client.get_read_write_lock("app:w-rw")
    rw.write_lock().lock(lease_time=30)
    _wakes_on_message(
        admin, "redisson_rwlock:{app:w-rw}", _lock_waiter(rw.read_lock()), rw.write_lock().unlock
    )

    sem = client.get_semaphore("app:w-sem")
    assert sem.try_set_permits(0)
    _wakes_on_message(
        admin, "redisson_sc:{app:w-sem}", lambda: sem.try_acquire(wait_time=5), sem.release
    )

    pes = client.get_permit_expirable_semaphore("app:w-pes")
    assert pes.try_set_permits(1)
    held = pes.acquire()  # no lease: the waiter can only be woken by the release
    assert held is not None

    def pes_wait() -> bool:
        permit = pes.try_acquire(wait_time=5, lease_time=5)
        return permit is not None and pes.try_release(permit)

    _wakes_on_message(admin, "redisson_sc:{app:w-pes}", pes_wait, lambda: pes.release(held))

    latch = client.get_count_down_latch("app:w-latch")
    assert latch.try_set_count(1)
    _wakes_on_message(
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
    granted = {rule[1:] for rule in ACL_COMMANDS if rule.startswith("+")}
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
    raw = _redis(acl.server.port, username=USER, password=USER_PASSWORD)
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
    rules = [r for r in ACL_RULES if not r.startswith("&")]
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


# -- authentication ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_server() -> Iterator[RedisServer]:
    """A server with a default-user password, the user ``locker`` and a disabled user."""
    server = RedisServer(args=["--requirepass", ADMIN_PASSWORD])
    admin = _redis(server.port, password=ADMIN_PASSWORD)
    try:
        admin.execute_command("ACL", "SETUSER", USER, *ACL_RULES)
        admin.execute_command("ACL", "SETUSER", "retired", "off", ">retired-pw", "+@all", "~*")
        yield server
    finally:
        admin.close()
        server.stop()


BAD_CREDENTIALS = {
    "wrong default-user password": ":wrong-password-1@",
    "wrong ACL-user password": f"{USER}:wrong-password-2@",
    "unknown user": "nobody:wrong-password-3@",
    "disabled user": "retired:retired-pw@",
    "no password": "",
}


@pytest.mark.parametrize("case", list(BAD_CREDENTIALS))
def test_bad_credentials_fail_fast_with_a_typed_error(auth_server: RedisServer, case: str) -> None:
    url = f"redis://{BAD_CREDENTIALS[case]}127.0.0.1:{auth_server.port}"
    started = time.monotonic()
    with pytest.raises(syncprims.SyncPrimsError) as info:
        syncprims.connect(url)
    assert time.monotonic() - started < 2.0
    error = info.value
    # Its own type, a ServerReplyError, not a connection error: it is not retried.
    assert isinstance(error, syncprims.AuthenticationError)
    assert isinstance(error, syncprims.ServerReplyError)
    assert isinstance(error.__cause__, redis.exceptions.AuthenticationError)
    assert re.search(r"(?i)password|auth", str(error))
    for secret in ("wrong-password", "retired-pw"):
        assert secret not in str(error) and secret not in repr(error)


@pytest.mark.parametrize("client_retry", ["redis-py default", "none"])
def test_bad_credentials_on_first_use_fail_within_a_bound(
    auth_server: RedisServer, client_retry: str
) -> None:
    # Credentials that go stale while the client runs (the password is rotated, the old
    # connections are killed): the next use fails with AuthenticationError, within the
    # client's operation bound. redis-py 8 retries the whole connect-and-handshake under the
    # client's own Retry (AuthenticationError is a redis ConnectionError there), so with its
    # default Retry that takes its back-off; with no Retry it is one round trip.
    extra: dict[str, Any] = {} if client_retry != "none" else {"retry": Retry(NoBackoff(), 0)}
    r = redis.Redis(port=auth_server.port, username=USER, password="wrong-password-4", **extra)
    admin = _redis(auth_server.port, password=ADMIN_PASSWORD)
    raw_command(admin, "ACL", "SETUSER", USER, ">wrong-password-4")
    client = syncprims.connect(r)
    raw_command(admin, "ACL", "SETUSER", USER, "<wrong-password-4")
    raw_command(admin, "CLIENT", "KILL", "USER", USER)
    admin.close()
    bound = client.operation_timeout
    try:
        started = time.monotonic()
        with pytest.raises(syncprims.AuthenticationError, match=r"(?i)password") as info:
            client.get_lock("app:x").try_lock(lease_time=1)
        elapsed = time.monotonic() - started
    finally:
        client.shutdown()
        r.close()
    assert isinstance(info.value.__cause__, redis.exceptions.AuthenticationError)
    assert "wrong-password-4" not in str(info.value)
    # syncprims does not retry it (it cannot succeed by trying again).
    assert elapsed < (0.5 if client_retry == "none" else bound)


def test_the_right_credentials_work(auth_server: RedisServer) -> None:
    url = f"redis://{USER}:{USER_PASSWORD}@127.0.0.1:{auth_server.port}"
    with syncprims.connect(url) as client:
        lock = client.get_lock("app:auth-ok")
        assert lock.try_lock(lease_time=5)
        lock.unlock()
    # The same user through the application's own client: its credentials are used.
    r = redis.Redis(port=auth_server.port, username=USER, password=USER_PASSWORD)
    with syncprims.connect(r) as client:
        assert USER_PASSWORD not in repr(client) and USER_PASSWORD not in repr(client.config)
        assert client.get_semaphore("app:auth-sem").available_permits() == 0
    r.close()


# -- TLS --------------------------------------------------------------------------------------


@dataclass
class Pki:
    ca: str
    files: dict[str, tuple[str, str]]  # name -> (certificate, key)


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")


def _make_pki(folder: Path) -> Pki:
    """A test CA, two server certificates (one for localhost/127.0.0.1, one for
    wrong.example only) and a client certificate, all EC P-256, valid for two days."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=syncprims test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip
    leaves = {
        "server": ("localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", "serverAuth"),
        "wrong-host": ("wrong.example", "subjectAltName=DNS:wrong.example", "serverAuth"),
        "client": ("syncprims test client", "", "clientAuth"),
    }
    files: dict[str, tuple[str, str]] = {}
    for name, (cn, san, usage) in leaves.items():
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}", cwd=folder)  # fmt: skip
        (folder / f"{name}.ext").write_text(
            f"{san}\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage={usage}\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid,issuer\n"
        )
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
            cwd=folder,
        )  # fmt: skip
        files[name] = (str(folder / f"{name}.crt"), str(folder / f"{name}.key"))
    return Pki(ca=str(folder / "ca.crt"), files=files)


@dataclass
class TlsServers:
    pki: Pki
    good: int  # TLS port, certificate for localhost and 127.0.0.1
    wrong_host: int  # TLS port, certificate for wrong.example
    mutual: int  # TLS port, clients must show a certificate signed by the CA
    plain: int  # the plain port of the first server


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServers]:
    """Three TLS servers. Each keeps a plain port too (RedisServer PINGs it to know the
    server is up); the tests use the ``--tls-port``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH: cannot make test certificates")
    pki = _make_pki(tmp_path_factory.mktemp("pki"))
    servers: list[RedisServer] = []
    ports: list[int] = []
    try:
        for name, auth_clients in (("server", "no"), ("wrong-host", "no"), ("server", "yes")):
            cert, key = pki.files[name]
            port = free_port()
            args = [
                "--tls-port", str(port), "--tls-cert-file", cert, "--tls-key-file", key,
                "--tls-ca-cert-file", pki.ca, "--tls-auth-clients", auth_clients,
            ]  # fmt: skip
            try:
                servers.append(RedisServer(args=args))
            except RuntimeError as error:
                pytest.skip(f"redis-server cannot serve TLS (built without it?): {error}")
            ports.append(port)
        yield TlsServers(pki, ports[0], ports[1], ports[2], servers[0].port)
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def collect_garbage() -> Iterator[None]:
    yield
    gc.collect()


def _tls_client(host: str, port: int, tls: TlsServers, **options: Any) -> redis.Redis:
    """The application's TLS client (the test CA; 1 s timeouts). Its ``Retry`` makes no
    retries: redis-py retries a refused handshake with the client's ``Retry`` (10 times by
    default), which would only make the refusals below slower."""
    settings: dict[str, Any] = {
        "ssl": True,
        "ssl_ca_certs": tls.pki.ca,
        "socket_timeout": 1,
        "socket_connect_timeout": 1,
        "retry": Retry(NoBackoff(), 0),
    }
    settings.update(options)
    return redis.Redis(host=host, port=port, **settings)


@pytest.mark.usefixtures("collect_garbage")
@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_tls_with_the_test_ca_works(tls: TlsServers, host: str) -> None:
    admin = _redis(tls.plain)
    r = _tls_client(host, tls.good, tls)
    try:
        with syncprims.connect(r, wait_recheck_interval=10) as client:
            lock = client.get_lock(f"app:tls-{host}")
            lock.lock()
            assert lock.is_held_by_current_thread()
            lock.unlock()
            # The pub/sub connection is TLS too: a waiter is woken by the unlock message.
            lock.lock(lease_time=30)
            _wakes_on_message(
                admin, f"redisson_lock__channel:{{{lock.name}}}", _lock_waiter(lock), lock.unlock
            )
    finally:
        admin.close()
        r.close()
    # The URL form: redis-py's query parameters.
    url = f"rediss://{host}:{tls.good}?ssl_ca_certs={tls.pki.ca}"
    with syncprims.connect(url) as client:
        assert client.get_lock(f"app:tls-url-{host}").try_lock(lease_time=1)


def _refused(source: str | redis.Redis) -> syncprims.SyncPrimsError:
    started = time.monotonic()
    with pytest.raises(syncprims.TransportError) as info, syncprims.connect(source) as client:
        client.get_lock("app:tls-refused").try_lock(lease_time=1)
    assert time.monotonic() - started < 3.0
    if isinstance(source, redis.Redis):
        source.close()
    return info.value


@pytest.mark.usefixtures("collect_garbage")
def test_tls_refuses_a_certificate_for_another_host(tls: TlsServers) -> None:
    error = _refused(_tls_client("localhost", tls.wrong_host, tls))
    assert isinstance(error, syncprims.RedisConnectionError)
    assert "certificate verify failed" in str(error)
    assert "Hostname mismatch" in str(error)


@pytest.mark.usefixtures("collect_garbage")
def test_tls_refuses_a_certificate_the_system_store_does_not_trust(tls: TlsServers) -> None:
    error = _refused(f"rediss://localhost:{tls.good}")  # no ca_certs: the system store
    # The refusal is bounded with redis-py's default Retry too: it retries the handshake.
    started = time.monotonic()
    default = redis.Redis(host="localhost", port=tls.good, ssl=True, socket_connect_timeout=1)
    with pytest.raises(syncprims.RedisConnectionError):
        syncprims.connect(default, retry_attempts=0)
    bound = Bounds(timeout=1, connect_timeout=1 * 11 + 1 * 10, retry_attempts=0, retry_delay_cap=2)
    assert time.monotonic() - started <= bound.operation_timeout
    default.close()
    assert isinstance(error, syncprims.RedisConnectionError)
    assert "certificate verify failed" in str(error)


@pytest.mark.usefixtures("collect_garbage")
def test_tls_client_certificate(tls: TlsServers) -> None:
    cert, key = tls.pki.files["client"]
    mutual = _tls_client("localhost", tls.mutual, tls, ssl_certfile=cert, ssl_keyfile=key)
    with syncprims.connect(mutual) as client:
        lock = client.get_lock("app:tls-mutual")
        assert lock.try_lock(lease_time=5)
        lock.unlock()
    mutual.close()
    # Without one, the server ends the handshake: a typed error, promptly.
    _refused(_tls_client("localhost", tls.mutual, tls))


@pytest.mark.usefixtures("collect_garbage")
@pytest.mark.parametrize("mismatch", ["plain client, TLS port", "TLS client, plain port"])
def test_tls_and_plain_mismatch_fail_promptly(tls: TlsServers, mismatch: str) -> None:
    if mismatch.startswith("plain"):
        source = redis.Redis(
            port=tls.good, socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
        )
    else:
        source = _tls_client("localhost", tls.plain, tls)
    # The TLS client gets no ServerHello from a plain server: the reply timeout ends it.
    _refused(source)


# -- owner ids and scripts --------------------------------------------------------------------


def test_owner_ids_are_unguessable(redis_server: RedisServer) -> None:
    """Client ids are UUID4s (122 random bits), request and permit ids 128 random bits."""
    client_ids = [uuid.UUID(ids.new_client_id()) for _ in range(1000)]
    assert all(u.version == 4 and u.variant == uuid.RFC_4122 for u in client_ids)
    assert len(set(client_ids)) == 1000

    def varying_bits(values: list[int], width: int) -> int:
        every, anyone = (1 << width) - 1, 0
        for value in values:
            every &= value
            anyone |= value
        return bin(anyone & ~every).count("1")

    # Over 1000 draws a truly random bit is constant with probability 2**-999.
    assert varying_bits([u.int for u in client_ids], 128) == 122
    requests = [ids.new_request_id() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", r) for r in requests)
    assert varying_bits([int(r, 16) for r in requests], 128) == 128

    admin = _redis(redis_server.port)
    clients = [syncprims.connect(redis_server.url) for _ in range(2)]
    try:
        assert clients[0].id != clients[1].id
        for client in clients:
            assert uuid.UUID(client.id).version == 4 and str(uuid.UUID(client.id)) == client.id
        name = f"app:owner-{uuid.uuid4()}"
        lock = clients[0].get_lock(name)
        lock.lock(lease_time=5)
        # The owner field in Redis is "<client id>:<thread>": guessing it takes the UUID.
        assert admin.hkeys(name) == [f"{clients[0].id}:{threading.get_ident()}".encode()]
        lock.unlock()
        pes = clients[1].get_permit_expirable_semaphore(f"app:permits-{uuid.uuid4()}")
        pes.try_set_permits(64)
        permits = [pes.acquire(lease_time=5) for _ in range(64)]
        assert len(set(permits)) == 64
        assert varying_bits([int(p or "", 16) for p in permits], 128) > 100
        pes.delete()
    finally:
        for client in clients:
            client.shutdown()
        admin.close()


_LUA = resources.files("syncprims._protocol").joinpath("lua")
# A channel that is not a key: the latch's channel comes in ARGV (as in Redisson).
_CHANNELS_IN_ARGV = {("latch_ops.lua", "ARGV[4]")}
_ROOTED = re.compile(r"KEYS\[[^\]]+\](\s*\.\.\s*.+)?$")  # KEYS[i], or KEYS[i] .. suffix
_DYNAMIC_CODE = re.compile(r"\b(loadstring|load|dofile|require|setfenv|getfenv|_G)\b")


def _calls(source: str, function: str) -> Iterator[list[str]]:
    """The argument lists (split on top-level commas) of every ``function(...)`` in
    ``source``, definitions (``local function f(a, b)``) included."""
    for match in re.finditer(r"(?<![\w.])" + re.escape(function) + r"\(", source):
        depth, start, i, quote = 1, match.end(), match.end(), ""
        args: list[str] = []
        while depth:
            ch = source[i]
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "," and depth == 1:
                args.append(source[start:i].strip())
                start = i + 1
            i += 1
        args.append(source[start : i - 1].strip())
        yield args


def _script_violations(sources: dict[str, str], granted: set[str]) -> list[str]:
    """What breaks the rules in Lua ``sources`` (file name -> text without comment lines):

    * every key a ``redis.call``/``redis.pcall`` touches is a ``KEYS`` entry, or one with a
      suffix appended, or a local or helper parameter holding one (helpers' call sites are
      checked in turn): no ``ARGV`` datum, no literal, chooses a key;
    * a command is a literal the ACL user is granted, or comes from ``ARGV`` (the library
      passes ``PUBLISH``/``SPUBLISH``, ``pexpire``/``pexpireat``);
    * no code is built at run time.
    """
    found: list[str] = []
    helpers: dict[str, tuple[str, list[str]]] = {}  # name -> (file, parameters)
    for file, source in sources.items():
        for match in re.finditer(r"local function (\w+)\(([^)]*)\)", source):
            helpers[match[1]] = (file, [p.strip() for p in match[2].split(",") if p.strip()])
    key_params: dict[str, set[int]] = {}  # helper -> positions of parameters used as keys
    for file, source in sources.items():
        if _DYNAMIC_CODE.search(source):
            found.append(f"{file}: builds code at run time")
        derived = {
            m[1] for m in re.finditer(r"local (\w+) = (.+)", source) if _ROOTED.match(m[2].strip())
        }
        params = {
            p: (name, pos)
            for name, (where, ps) in helpers.items()
            if where == file
            for pos, p in enumerate(ps)
        }
        for call in ("redis.call", "redis.pcall"):
            for args in _calls(source, call):
                command, key = args[0], args[1] if len(args) > 1 else ""
                text = f"{file}: {call}({', '.join(args)})"
                if command.startswith("'"):
                    if command.strip("'").lower() not in granted:
                        found.append(f"{text}: command not granted to the ACL user")
                elif not re.fullmatch(r"ARGV\[\d+\]", command) and command not in params:
                    found.append(f"{text}: command from data")
                if not key or _ROOTED.match(key) or key in derived:
                    continue
                if key in params:
                    name, pos = params[key]
                    key_params.setdefault(name, set()).add(pos)
                elif (file, key) not in _CHANNELS_IN_ARGV:
                    found.append(f"{text}: key not from KEYS")
    for name, positions in key_params.items():
        for file, source in sources.items():
            for args in _calls(source, name):
                if args == helpers[name][1]:
                    continue  # the definition
                for pos in positions:
                    if pos >= len(args) or not _ROOTED.match(args[pos]):
                        found.append(f"{file}: {name}({', '.join(args)}): key not from KEYS")
    return found


def test_scripts_take_every_key_from_KEYS() -> None:  # noqa: N802
    """Every key a script touches comes from ``KEYS``, every literal command is granted to
    the least-privilege user, and no code is built at run time."""
    granted = {rule[1:] for rule in ACL_COMMANDS if rule.startswith("+")}
    sources = {
        path.name: "\n".join(
            line for line in path.read_text("utf-8").splitlines() if not line.startswith("--")
        )
        for path in _LUA.iterdir()
        if path.name.endswith(".lua")
    }
    assert len(sources) >= 20
    assert sum(len(list(_calls(s, "redis.call"))) for s in sources.values()) > 150
    assert _script_violations(sources, granted) == []

    # The checker itself catches what it looks for.
    bad = {
        "a.lua": "redis.call('set', ARGV[1], '1')",
        "b.lua": "redis.call('get', 'fixed:key')",
        "c.lua": "local k = ARGV[2]\nredis.call('del', k)",
        "d.lua": "redis.call('flushall')",
        "e.lua": "local c = 'del'\nredis.call(c, KEYS[1])",
        "f.lua": "loadstring(ARGV[1])()",
        "g.lua": "local function h(name)\n  redis.call('del', name)\nend\nh(ARGV[1])",
    }
    violations = _script_violations(bad, granted)
    assert {v.split(":")[0] for v in violations} == set(bad), violations
    good = {
        "h.lua": "local function h(name)\n  redis.call('del', name)\nend\nh(KEYS[1] .. ':x')",
        "i.lua": "local k = KEYS[2] .. ':' .. ARGV[1]\nredis.call(ARGV[3], k, '0')",
    }
    assert _script_violations(good, granted) == []
