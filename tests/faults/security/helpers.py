"""Shared by the security tests: the least-privilege ACL rule set, the users, and helpers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.exceptions

import syncprims

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
    # RLock's one wake-up per release (syncprims only): waiting clients, the reservation,
    # and the herald channel (in KEYS too); the one-hop grant's marker
    "~syncprims_lock_waiters:{app:*",
    "~syncprims_lock_next:{app:*",
    "~syncprims_lock_herald:{app:*",
    "~syncprims_lock_granted:{app:*",
    "~syncprims_lock_handoff:{app:*",  # the direct grant's lists (made in the script)
    "~syncprims_client:*",  # each client's record (host, pid) for info() and inspect
    "~*syncprims_election:{app:*",  # LeaderElection: its FairLock's keys (the lock is named so)
    "~syncprims_election_term:{app:*",  # LeaderElection: the term counter
    "~syncprims_election_channel:{app:*",  # LeaderElection: the observers' channel (in KEYS)
)
"""Key patterns (``~``) of the ACL user."""

ACL_CHANNELS = (
    "&redisson_lock__channel:{app:*",  # RLock, FencedLock, FairLock (and its per-waiter channels)
    "&redisson_rwlock:{app:*",  # ReadWriteLock
    "&redisson_sc:{app:*",  # Semaphore, PermitExpirableSemaphore
    "&redisson_countdownlatch__channel__{app:*",  # CountDownLatch (given in ARGV, not KEYS)
    "&syncprims_lock_herald:{app:*",  # RLock: which client a release wakes
    "&syncprims_lock_grant:{app:*",  # RLock: a client's one-hop grants (given in ARGV)
    "&*syncprims_election:{app:*",  # LeaderElection: its FairLock's wake-ups and grants
    "&syncprims_election_channel:{app:*",  # LeaderElection: observe()
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
    "+zremrangebyscore", "+time",  # RLock's waiting clients (expired entries, server time)
    "+blpop", "+lpush", "+pubsub|numsub",  # RLock's direct grant (blocking face)
    "+hmget",  # LeaderElection: leader()
)  # fmt: skip
"""Commands of the ACL user. Not granted here, and needed only by some features: ``+wait``
(``Config.lock_synced_replicas``, where the master has replicas), ``+pexpireat``
(``expire_at()``); a cluster also needs ``+cluster|slots``, ``+asking``, ``+spublish``,
``+ssubscribe``, ``+sunsubscribe`` and ``+pubsub|shardnumsub`` (Redis 6.2 has no sharded
pub/sub and rejects the rules of its three commands). Not here either: the rules for
redis-py's own calls on connect, which depend on the server (:func:`connect_rules`)."""

ACL_RULES = (
    "reset",
    # Redis 6.2's "reset" (and a new user) allows every channel (acl-pubsub-default is
    # allchannels there, resetchannels from 7.0), and a "&" pattern after that is an error
    "resetchannels",
    "on",
    f">{USER_PASSWORD}",
    *ACL_KEYS,
    *ACL_CHANNELS,
    *ACL_COMMANDS,
)
"""``ACL SETUSER locker <rules>``, on every server; add :func:`connect_rules` for the
server's version."""


def connect_rules(admin: Any) -> tuple[str, ...]:
    """The rules, by server version, for the calls redis-py makes on every new connection
    after ``HELLO``/``AUTH``: ``CLIENT SETINFO LIB-NAME``/``LIB-VER`` (redis-py 5+) and, over
    RESP3 (redis-py 8's default), ``CLIENT MAINT_NOTIFICATIONS ON`` (a Redis Cloud/Enterprise
    command). redis-py ignores their errors, but each refusal is a ``NOPERM`` entry in
    ``ACL LOG``; a server that does not know a subcommand replies "unknown subcommand"
    without an ACL check (Redis 7+, Valkey), except Redis 6, which checks the ACL first.

    * Redis 7.2+ and Valkey (whose ``redis_version`` says 7.2.4): ``+client|setinfo``.
    * Redis 7.0 and 7.1: nothing (``ACL SETUSER`` rejects ``+client|setinfo``: "Unknown
      command or category name in ACL").
    * Redis 6.2: ``+client|setinfo +client|maint_notifications`` (it takes any subcommand
      name; both then fail as unknown subcommands, granting nothing).
    """
    version = str(admin.info("server")["redis_version"])
    major, minor = (int(part) for part in version.split(".")[:2])
    if major < 7:
        return ("+client|setinfo", "+client|maint_notifications")
    if (major, minor) < (7, 2):
        return ()
    return ("+client|setinfo",)


def plain_redis(port: int, **options: Any) -> Any:
    """A plain redis-py client (typed ``Any``: redis-py's reply types are a union with
    ``Awaitable``)."""
    return redis.Redis(port=port, socket_timeout=5, **options)


def until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def wakes_on_message(
    admin: Any,
    channel_glob: str,
    wait: Callable[[], bool],
    release: Callable[[], object],
    registered: Callable[[], object] | None = None,
) -> None:
    """Run ``wait`` in a thread; once it is subscribed to a channel matching ``channel_glob``
    (and ``registered()`` is true: its wait is recorded in Redis, where a lock kind records
    one), ``release`` what it waits for, and check it returns ``True`` promptly.

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
    until(lambda: admin.pubsub_channels(channel_glob), 5, f"a subscriber of {channel_glob}")
    if registered is not None:  # subscribed comes first: a release before this finds no wait
        until(registered, 5, f"the waiter on {channel_glob} to record its wait")
    released = time.monotonic()
    release()
    thread.join(5)
    woken_after = time.monotonic() - released
    assert not thread.is_alive(), f"the waiter on {channel_glob} is still waiting"
    assert result == [True], result
    assert woken_after < 2.0, f"the waiter on {channel_glob} woke {woken_after:.2f} s late"


def lock_waiter(lock: syncprims.RLock, wait_time: float = 5.0) -> Callable[[], bool]:
    def wait() -> bool:
        acquired = lock.try_lock(wait_time=wait_time, lease_time=5)
        if acquired:
            lock.unlock()
        return acquired

    return wait
